#!/usr/bin/env python3
"""Unit tests of yocto-layer/lib/rtcat (the helpers the layer's conf files and recipes call),
run without bitbake: a minimal stand-in for the bb module and the datastore.

    python3 yocto-layer/tests/test_lib.py
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import types
import unittest
from pathlib import Path

LAYER = Path(__file__).resolve().parent.parent
TOP = LAYER.parent


class Fatal(Exception):
    pass


def fake_bb():
    bb = types.ModuleType("bb")
    bb.parse = types.SimpleNamespace(deps=[])
    bb.parse.mark_dependency = lambda d, f: bb.parse.deps.append(f)

    def fatal(msg):
        raise Fatal(msg)

    bb.fatal = fatal
    return bb


sys.modules["bb"] = fake_bb()
sys.path.insert(0, str(LAYER / "lib"))
import rtcat  # noqa: E402


class D:
    """The datastore calls the helpers make: getVar only."""

    def __init__(self, **v):
        self.v = v

    def getVar(self, name):
        return self.v.get(name)


def sh_env(key, env_file):
    out = subprocess.run(
        ["bash", "-c", f'. "{env_file}"; printf %s "${key}"'],
        check=True, capture_output=True, text=True)
    return out.stdout


class CpuSets(unittest.TestCase):
    def test_values_match_what_the_shell_reads(self):
        d = D(RTCAT_TOPDIR=str(TOP))
        env_file = TOP / "kernel" / "rt-cpus.env"
        for key in rtcat.ENV_KEYS:
            self.assertEqual(rtcat.cpus(d, key), sh_env(key, env_file), key)
        self.assertIn(str(env_file), sys.modules["bb"].parse.deps)

    def test_bad_env_file_names_the_line(self):
        with tempfile.TemporaryDirectory() as t:
            os.makedirs(f"{t}/kernel")
            Path(f"{t}/kernel/rt-cpus.env").write_text("RTCAT_RT_CPUS=6\nBOGUS=1\n")
            with self.assertRaisesRegex(Fatal, r"rt-cpus.env:2: unknown key 'BOGUS'"):
                rtcat.cpus(D(RTCAT_TOPDIR=t), "RTCAT_RT_CPUS")
            Path(f"{t}/kernel/rt-cpus.env").write_text("RTCAT_RT_CPUS=6\n")
            with self.assertRaisesRegex(Fatal, "RTCAT_HOUSEKEEPING_CPUS is not set"):
                rtcat.cpus(D(RTCAT_TOPDIR=t), "RTCAT_HOUSEKEEPING_CPUS")

    def test_missing_topdir(self):
        with self.assertRaisesRegex(Fatal, "RTCAT_TOPDIR"):
            rtcat.cpus(D(RTCAT_TOPDIR="/nonexistent-rtcat"), "RTCAT_RT_CPUS")


class BootArgs(unittest.TestCase):
    def d(self, **kw):
        v = dict(RTCAT_TOPDIR=str(TOP))
        for key in rtcat.ENV_KEYS:
            v[key] = rtcat.cpus(D(RTCAT_TOPDIR=str(TOP)), key)
        v.update(kw)
        return D(**v)

    def test_same_string_as_bootargs_sh(self):
        want = subprocess.run(["bash", str(TOP / "kernel/bootargs.sh"), "--format", "plain"],
                              check=True, capture_output=True, text=True).stdout.strip()
        got = rtcat.bootargs(self.d())
        self.assertEqual(got, want)
        rt = rtcat.cpus(D(RTCAT_TOPDIR=str(TOP)), "RTCAT_RT_CPUS")
        hk = rtcat.cpus(D(RTCAT_TOPDIR=str(TOP)), "RTCAT_HOUSEKEEPING_CPUS")
        for arg in (f"nohz_full={rt}", f"rcu_nocbs={rt}", f"irqaffinity={hk}"):
            self.assertIn(arg, got.split())

    def test_override_is_used_and_validated(self):
        self.assertIn("nohz_full=2-3", rtcat.bootargs(self.d(RTCAT_RT_CPUS="2-3", RTCAT_HOUSEKEEPING_CPUS="0-1,4-7")))
        with self.assertRaisesRegex(Fatal, "RTCAT_RT_CPUS"):
            rtcat.bootargs(self.d(RTCAT_RT_CPUS="9"))

    def test_base_args_are_kept(self):
        got = rtcat.bootargs(self.d(), base="console=ttyS2 root=PARTLABEL=rootfs isolcpus=1")
        self.assertTrue(got.startswith("console=ttyS2 root=PARTLABEL=rootfs "), got)
        self.assertNotIn("isolcpus=1", got.split())


class KernelFiles(unittest.TestCase):
    def test_fragments_exist_and_missing_one_is_named(self):
        d = D(RTCAT_TOPDIR=str(TOP))
        self.assertEqual(rtcat.kernel_fragments(d, "rt-core.cfg"), "file://fragments/rt-core.cfg")
        with self.assertRaisesRegex(Fatal, "no-such.cfg"):
            rtcat.kernel_fragments(d, "rt-core.cfg no-such.cfg")

    def test_patch_listing(self):
        with tempfile.TemporaryDirectory() as t:
            os.makedirs(f"{t}/kernel/patches/x")
            for n in ("0002-b.patch", "0001-a.patch", "README"):
                Path(f"{t}/kernel/patches/x/{n}").write_text("")
            d = D(RTCAT_TOPDIR=t)
            self.assertEqual(rtcat.kernel_files(d, "patches/x", ".patch"),
                             "file://patches/x/0001-a.patch file://patches/x/0002-b.patch")
            with self.assertRaisesRegex(Fatal, "kernel/patches/y"):
                rtcat.kernel_files(d, "patches/y", ".patch")
            shutil.rmtree(f"{t}/kernel/patches/x")
            os.makedirs(f"{t}/kernel/patches/x")
            with self.assertRaisesRegex(Fatal, "no \\*.patch files"):
                rtcat.kernel_files(d, "patches/x", ".patch")


class Config(unittest.TestCase):
    SHIPPED = (TOP / "rootfs-overlay/etc/rtcat/rtcat.toml").read_text()

    def d(self, **kw):
        v = {k: rtcat.cpus(D(RTCAT_TOPDIR=str(TOP)), k) for k in rtcat.ENV_KEYS}
        distro = (LAYER / "conf/distro/rtcat-os.conf").read_text()
        v["RTCAT_ETHERCAT_IFACE"] = re.search(r'^RTCAT_ETHERCAT_IFACE = "([^"]+)"', distro, re.M).group(1)
        v.update(kw)
        return D(**v)

    def test_defaults_give_the_shipped_file(self):
        # rt-cpus.env and the distro's port name are what the shipped file says
        self.assertEqual(rtcat.config_text(self.d(), self.SHIPPED), self.SHIPPED)

    def test_override_reaches_the_config(self):
        got = tomllib.loads(rtcat.config_text(
            self.d(RTCAT_RT_CPUS="2-3", RTCAT_HOUSEKEEPING_CPUS="0-1,4-7", RTCAT_ETHERCAT_IFACE="ecat9"), self.SHIPPED))
        self.assertEqual(got["bus"]["interface"], "ecat9")
        self.assertEqual((got["cycle"]["cpu"], got["cycle"]["txrx_cpu"]), (2, 2))
        self.assertEqual(got["tune"]["housekeeping_cpus"], "0-1,4-7")
        self.assertEqual(got["tune"]["nic_irq_cpu"], 5)

    def test_nic_irq_cpu_must_be_housekeeping(self):
        with self.assertRaisesRegex(Fatal, r"nic_irq_cpu = 5 is not a housekeeping CPU"):
            rtcat.config_text(self.d(RTCAT_RT_CPUS="5", RTCAT_HOUSEKEEPING_CPUS="0-4,6-7"), self.SHIPPED)

    def test_missing_key_and_bad_list(self):
        with self.assertRaisesRegex(Fatal, r"no \[bus\].interface"):
            rtcat.config_text(self.d(), self.SHIPPED.replace('interface = "ecat0"', ""))
        with self.assertRaisesRegex(Fatal, "RTCAT_RT_CPUS: '6-x'"):
            rtcat.config_text(self.d(RTCAT_RT_CPUS="6-x"), self.SHIPPED)


class Provider(unittest.TestCase):
    def test_flavours(self):
        self.assertEqual(rtcat.kernel_provider(D(RTCAT_KERNEL_FLAVOUR="mainline-rt")), "linux-yocto-rt")
        self.assertEqual(rtcat.kernel_provider(D(RTCAT_KERNEL_FLAVOUR="bsp-rt")), "linux-rockchip-rt")
        with self.assertRaisesRegex(Fatal, "RTCAT_KERNEL_FLAVOUR: 'rt'"):
            rtcat.kernel_provider(D(RTCAT_KERNEL_FLAVOUR="rt"))


if __name__ == "__main__":
    unittest.main(verbosity=1)
