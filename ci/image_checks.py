#!/usr/bin/env python3
"""Static checks of the rtcat image sources, called by ci/check-image.sh.

    ci/image_checks.py kas        kas files: kas's JSON schema, every repo pinned by branch and
                                  full commit, lock files pinning exactly those commits
    ci/image_checks.py readme     yocto-layer/README.md lists every layer's URL, branch and commit
    ci/image_checks.py --rtcat BIN config [FILE]   /etc/rtcat/rtcat.toml: valid for
                                  `rtcat config check` (types, ranges, unknown keys: rtcat's own
                                  validator), spells out the keys a board review reads, and
                                  agrees with kernel/rt-cpus.env (CPU lists parsed by
                                  `rtcat config cpus`), the .network/.link files, the sysctl.d
                                  snippet, the distro's RTCAT_ETHERCAT_IFACE and output.dir
    ci/image_checks.py --rtcat BIN example   app/master/rtcat.example.toml passes
                                  `rtcat config check` and is what `rtcat config example` prints
    ci/image_checks.py cross      Cross.toml configures target.aarch64-unknown-linux-gnu
    ci/image_checks.py recipes    every local file a recipe names exists; LIC_FILES_CHKSUM
                                  md5 sums match; every kernel fragment named exists
    ci/image_checks.py sysctl FILE     syntax of a sysctl.d snippet
    ci/image_checks.py links      every machine's 10-rtcat-ethercat.link, run through udev
                                  (udevadm test, real rules and .link parser) against a fake
                                  sysfs of the board's NICs in a private mount + network
                                  namespace: it names the board's EtherCAT port [bus].interface
                                  and no other port; without it the port is not so named
    ci/image_checks.py networks   the image's .network files under systemd-networkd (its parser
                                  and its behaviour, same namespaces): the EtherCAT port comes
                                  up without any address, a maintenance port gets link-local
    ci/image_checks.py rootfs     per machine of the kas files, what the image installs (static:
                                  FILESPATH of rtcat-board, do_install and FILES of the rtcat
                                  recipes): exactly one .link naming the EtherCAT port

Each problem is printed as "FILE: field: message"; the exit status is 1 when there is any.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import yaml

TOP = Path(
    subprocess.run(
        ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--show-toplevel"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
)
LAYER = TOP / "yocto-layer"
EXAMPLE_CONFIG = TOP / "app/master/rtcat.example.toml"
RTCAT_BIN = None  # --rtcat BIN
KAS = LAYER / "kas"
errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


def rel(p):
    return str(Path(p).relative_to(TOP))


# ---------------------------------------------------------------------------------------------
def load_yaml(p):
    with open(p) as f:
        return yaml.safe_load(f)


def kas_resolved(p, seen=None):
    """repos of a kas file merged with its includes (depth first, later wins), like kas."""
    seen = seen or []
    data = load_yaml(p)
    repos = {}
    for inc in (data.get("header") or {}).get("includes") or []:
        if not isinstance(inc, str):
            err(rel(p), f"header.includes: only includes of this repository are used, got {inc!r}")
            continue
        ip = TOP / inc
        if not ip.is_file():
            err(rel(p), f"header.includes: {inc} does not exist")
            continue
        if ip in seen:
            err(rel(p), f"header.includes: include loop through {inc}")
            continue
        for k, v in kas_resolved(ip, seen + [p]).items():
            repos.setdefault(k, {}).update(v or {})
    for k, v in (data.get("repos") or {}).items():
        repos.setdefault(k, {}).update(v or {})
    return repos


def check_kas():
    import jsonschema
    from kas.configschema import CONFIGSCHEMA

    files = sorted(KAS.rglob("*.yml"))
    if not files:
        err(rel(KAS), "no kas files")
    validator = jsonschema.Draft7Validator(CONFIGSCHEMA)
    for p in files:
        data = load_yaml(p)
        for e in sorted(validator.iter_errors(data), key=str):
            path = ".".join(str(x) for x in e.absolute_path) or "(top)"
            err(rel(p), f"{path}: {e.message} (kas schema)")
        print(f"kas schema: {rel(p)}")
    tops = [p for p in files if p.parent == KAS and not p.name.endswith(".lock.yml")]
    if len(tops) < 2:
        err(rel(KAS), "expected one kas file per machine x kernel flavour (mainline-rt and bsp-rt)")
    flavours = set()
    for p in tops:
        data = load_yaml(p)
        if not data.get("machine"):
            err(rel(p), "machine: not set")
        conf = "\n".join((data.get("local_conf_header") or {}).values())
        m = re.search(r'^RTCAT_KERNEL_FLAVOUR = "([^"]+)"', conf, re.M)
        if not m or m.group(1) not in ("mainline-rt", "bsp-rt"):
            err(rel(p), "local_conf_header: RTCAT_KERNEL_FLAVOUR must be set to mainline-rt or bsp-rt")
        else:
            flavours.add(m.group(1))
        repos = kas_resolved(p)
        if "rtcat" not in repos:
            err(rel(p), "repos.rtcat: the repository's own layer is missing")
        for name, r in repos.items():
            if not r.get("url"):
                continue
            if not re.fullmatch(r"[0-9a-f]{40}", str(r.get("commit", ""))):
                err(rel(p), f"repos.{name}.commit: not pinned by a full commit id")
            if not r.get("branch"):
                err(rel(p), f"repos.{name}.branch: not set (kas checks that the branch holds the commit)")
        lock = p.with_name(p.stem + ".lock.yml")
        if not lock.is_file():
            err(rel(p), f"no lock file {lock.name}")
            continue
        pinned = (load_yaml(lock).get("overrides") or {}).get("repos") or {}
        want = {n: r["commit"] for n, r in repos.items() if r.get("url")}
        got = {n: (v or {}).get("commit") for n, v in pinned.items()}
        if want != got:
            err(rel(lock), f"overrides.repos: pins {got} but the kas files name {want}")
        print(f"kas pins: {rel(p)}: {len(want)} repositories pinned, lock file agrees" if want == got else "")
    # A distro name is an override: it must not be the name of one of our recipes (FILES:${PN}
    # would turn into a distro override; bitbake's pn-overrides QA check fails the parse).
    pns = {re.sub(r"_[^_]*$", "", q.stem) for q in LAYER.rglob("*.bb")}
    for p in files:
        distro = (load_yaml(p) or {}).get("distro")
        if distro and distro in pns:
            err(rel(p), f"distro: '{distro}' is also a recipe name (a distro name is an override)")
    if flavours != {"mainline-rt", "bsp-rt"}:
        err(rel(KAS), f"kernel flavours covered: {sorted(flavours)}; need mainline-rt and bsp-rt")


def check_readme():
    readme = (LAYER / "README.md").read_text()
    for p in sorted(KAS.glob("*.yml")):
        if p.name.endswith(".lock.yml"):
            continue
        for name, r in kas_resolved(p).items():
            if not r.get("url"):
                continue
            for field in ("url", "branch", "commit"):
                if str(r[field]) not in readme:
                    err("yocto-layer/README.md", f"{name} ({p.name}): {field} {r[field]} is not listed")
    print("README: every layer's url, branch and commit listed" if not errors else "")


# ---------------------------------------------------------------------------------------------
def rtcat(*args):
    """Run the rtcat binary CI built (--rtcat BIN): it holds the one configuration validator and
    the one CPU-list parser, so this script re-declares neither. (exit status, stdout, stderr)"""
    if not RTCAT_BIN:
        print("image_checks.py: config needs --rtcat BIN (the rtcat binary to ask)", file=sys.stderr)
        sys.exit(2)
    r = subprocess.run([RTCAT_BIN, *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def cpu_list(field, text):
    """The CPUs of a kernel CPU list, parsed by `rtcat config cpus`; None (and an error naming
    FIELD) when it is not one."""
    rc, out, e = rtcat("config", "cpus", "--json", "--", text)
    if rc != 0:
        err(field, e.strip())
        return None
    return set(json.loads(out)["cpus"])


# What the shipped file spells out rather than leaving to the built-in defaults: the sections
# and keys an integrator reviews for a board. Their types and ranges are `rtcat config check`'s.
SHIPPED_KEYS = {
    "bus": ["interface"],
    "cycle": ["period_us", "cpu", "priority", "txrx_cpu", "txrx_priority"],
    "rt": ["lock_memory", "hold_cpu_dma_latency", "timer_slack_ns"],
    "segment": ["subdevices"],
    "health": ["bad_cycles_before_recovery"],
    "output": ["dir", "samples_csv"],
}


def config_valid(path, where):
    """`rtcat config check`: TOML syntax, types, ranges, unknown keys, the interface name."""
    rc, out, e = rtcat("config", "check", str(path))
    if rc != 0:
        err(where, f"rtcat config check: exit {rc}: {e.strip()}")
        return False
    print(f"config: {where}: OK (rtcat config check)")
    return True


def check_example():
    """The example configuration (what `rtcat config example` prints) is valid."""
    config_valid(EXAMPLE_CONFIG, rel(EXAMPLE_CONFIG))
    rc, out, e = rtcat("config", "example")
    if rc != 0 or out != EXAMPLE_CONFIG.read_text():
        err(rel(EXAMPLE_CONFIG), f"rtcat config example does not print this file (exit {rc}: {e.strip()})")


def check_config(path):
    """The shipped config: valid (rtcat), its explicit keys, and its agreement with the files of
    the image that name the same CPUs, interface and directory."""
    where = rel(path) if str(path).startswith(str(TOP)) else str(path)
    if not config_valid(path, where):
        return
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    for section, keys in SHIPPED_KEYS.items():
        sec = cfg.get(section)
        if not isinstance(sec, dict):
            err(where, f"[{section}]: missing")
            continue
        for key in keys:
            if key not in sec:
                err(where, f"{section}.{key}: missing")
    if errors:
        return
    iface = cfg["bus"]["interface"]
    # Agreement with the CPU sets the kernel boot arguments are generated from.
    env = {}
    for line in (TOP / "kernel/rt-cpus.env").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            env[k] = v.strip('"')
    rt = cpu_list("kernel/rt-cpus.env: RTCAT_RT_CPUS", env["RTCAT_RT_CPUS"])
    hk = cpu_list("kernel/rt-cpus.env: RTCAT_HOUSEKEEPING_CPUS", env["RTCAT_HOUSEKEEPING_CPUS"])
    if rt is None or hk is None:
        return
    for key in ("cpu", "txrx_cpu"):
        if cfg["cycle"][key] not in rt:
            err(
                where,
                f"cycle.{key}: CPU {cfg['cycle'][key]} is not an isolated CPU "
                f"(RTCAT_RT_CPUS={env['RTCAT_RT_CPUS']} in kernel/rt-cpus.env)",
            )
    tune = cfg.get("tune", {})
    if "housekeeping_cpus" in tune and cpu_list("tune.housekeeping_cpus", tune["housekeeping_cpus"]) != hk:
        err(
            where,
            f"tune.housekeeping_cpus: {tune['housekeeping_cpus']!r} differs from "
            f"RTCAT_HOUSEKEEPING_CPUS={env['RTCAT_HOUSEKEEPING_CPUS']} in kernel/rt-cpus.env",
        )
    if "nic_irq_cpu" in tune and tune["nic_irq_cpu"] not in hk:
        err(where, f"tune.nic_irq_cpu: CPU {tune['nic_irq_cpu']} is not a housekeeping CPU")
    if cfg["output"]["dir"] != "/var/lib/rtcat":
        err(where, "output.dir: the units' StateDirectory and tmpfiles.d entry are /var/lib/rtcat")
    net = (TOP / "rootfs-overlay/usr/lib/systemd/network/10-rtcat-ethercat.network").read_text()
    if not re.search(rf"^Name={re.escape(iface)}$", net, re.M):
        err(
            "rootfs-overlay/usr/lib/systemd/network/10-rtcat-ethercat.network",
            f"[Match] Name: must be the EtherCAT NIC {iface} ([bus].interface)",
        )
    maint = (OVERLAY_NET / "20-rtcat-maintenance.network").read_text()
    if not re.search(rf"^Name=!{re.escape(iface)}$", maint, re.M):
        err(
            rel(OVERLAY_NET / "20-rtcat-maintenance.network"),
            f"[Match] Name: must exclude the EtherCAT NIC (Name=!{iface})",
        )
    sysctl = (TOP / "rootfs-overlay/usr/lib/sysctl.d/61-rtcat-ethercat.conf").read_text()
    if not re.search(rf"^net\.ipv6\.conf\.{re.escape(iface)}\.disable_ipv6 = 1$", sysctl, re.M):
        err(
            "rootfs-overlay/usr/lib/sysctl.d/61-rtcat-ethercat.conf", f"must set net.ipv6.conf.{iface}.disable_ipv6 = 1"
        )
    distro = (LAYER / "conf/distro/rtcat-os.conf").read_text()
    if not re.search(rf'^RTCAT_ETHERCAT_IFACE = "{re.escape(iface)}"$', distro, re.M):
        err("yocto-layer/conf/distro/rtcat-os.conf", f'RTCAT_ETHERCAT_IFACE must be "{iface}" ([bus].interface)')
    for link in board_links().values():
        name = [v for s, k, v, _ in ini(link.read_text()) if (s, k) == ("Link", "Name")]
        if name != [iface]:
            err(rel(link), f"[Link] Name: {name} must be [{iface!r}] ([bus].interface of the shipped config)")
    if not errors:
        print(
            f"config: {where}: contract and CPU sets OK "
            f"(cpu {cfg['cycle']['cpu']} isolated, housekeeping {env['RTCAT_HOUSEKEEPING_CPUS']})"
        )


# ---------------------------------------------------------------------------------------------
def recipe_vars(text):
    """Flatten line continuations; return (name, value) of simple assignments."""
    text = re.sub(r"\\\n", " ", text)
    for m in re.finditer(r'^([A-Za-z_][\w:${}/.-]*)\s*(?:\?\?=|\?=|:=|\+=|=\+|\.=|=)\s*"(.*)"\s*$', text, re.M):
        yield m.group(1), m.group(2)


def check_dist_profile():
    """The rtcat recipe builds with Cargo.toml's [profile.dist] (the .deb's profile)."""
    prof = tomllib.loads((TOP / "Cargo.toml").read_text())["profile"]
    dist = {**prof.get("release", {}), **prof["dist"]}
    recipe = LAYER / "recipes-rtcat/rtcat/rtcat_0.1.0.bb"
    exported = re.findall(r'^export CARGO_PROFILE_RELEASE_(\w+) = "([^"]*)"$', recipe.read_text(), re.M)
    got = {name.lower().replace("_", "-"): value for name, value in exported}
    for key in ("lto", "codegen-units", "debug"):
        want = dist.get(key)
        if want is None or got.get(key) != str(want):
            err(
                rel(recipe),
                f"export CARGO_PROFILE_RELEASE_{key.upper().replace('-', '_')} = {got.get(key)!r}, "
                f"Cargo.toml [profile.dist] {key} = {want!r}",
            )

    # [profile.dist.package.*] reach the recipe's release build through the cargo configuration
    # its do_configure appends to (the environment cannot set package overrides).
    fragment = recipe.parent / "files/cargo-dist-profile.toml"
    appended = tomllib.loads(fragment.read_text()) if fragment.is_file() else {}
    if "cargo-dist-profile.toml >> ${CARGO_HOME}/config.toml" not in recipe.read_text():
        err(rel(recipe), "do_configure does not append files/cargo-dist-profile.toml to the cargo configuration")
    got_pkgs = appended.get("profile", {}).get("release", {}).get("package", {})
    want_pkgs = prof["dist"].get("package", {})
    if got_pkgs != want_pkgs:
        err(
            rel(recipe),
            f"files/cargo-dist-profile.toml: [profile.release.package] = {got_pkgs!r}, "
            f"Cargo.toml [profile.dist.package] = {want_pkgs!r}",
        )


def check_recipes():
    check_dist_profile()
    recipes = sorted(list(LAYER.rglob("*.bb")) + list(LAYER.rglob("*.bbappend")))
    n_files = n_lic = 0
    for p in recipes:
        text = p.read_text()
        extra = []
        for m in re.finditer(r'FILESEXTRAPATHS:prepend(?::[\w-]+)? := "([^"]*)"', text):
            for e in m.group(1).split(":"):
                if e:
                    extra.append(e.replace("${RTCAT_TOPDIR}", str(TOP)))
        local = set()
        for name, value in recipe_vars(text):
            if name.startswith("SRC_URI"):
                local.update(u[len("file://") :].split(";")[0] for u in value.split() if u.startswith("file://"))
        for name, value in recipe_vars(text):
            if name.startswith("SRC_URI"):
                for uri in value.split():
                    if not uri.startswith("file://") or "${" in uri:
                        continue
                    path = uri[len("file://") :].split(";")[0]
                    # bitbake's FILESPATH: FILESEXTRAPATHS, then files/ of the recipe and its
                    # override directories (files/<MACHINE>/); a per-machine file must exist
                    # for every machine of the kas files (the rootfs check).
                    own = [p.parent / "files"] + [d for d in (p.parent / "files").glob("*") if d.is_dir()]
                    if not any((Path(e) / path).exists() for e in extra + own):
                        err(
                            rel(p), f"SRC_URI: {uri.split(';')[0]} not found in {', '.join(extra) or 'FILESEXTRAPATHS'}"
                        )
                    n_files += 1
            if name == "LIC_FILES_CHKSUM":
                for uri in value.split():
                    m = re.fullmatch(r"file://([^;]+);md5=([0-9a-f]{32})", uri)
                    if not m:
                        err(rel(p), f"LIC_FILES_CHKSUM: {uri!r} is not file://PATH;md5=SUM")
                        continue
                    if m.group(1) not in local:
                        continue  # a file of a fetched tree (the kernel's COPYING): bitbake checks it
                    cand = [Path(e) / m.group(1) for e in extra]
                    src = next((c for c in cand if c.is_file()), None)
                    if src is None:
                        err(rel(p), f"LIC_FILES_CHKSUM: {m.group(1)} not found")
                        continue
                    got = hashlib.md5(src.read_bytes()).hexdigest()
                    if got != m.group(2):
                        err(rel(p), f"LIC_FILES_CHKSUM: md5 of {m.group(1)} is {got}, recipe says {m.group(2)}")
                    n_lic += 1
            if name.startswith("RTCAT_KERNEL_FRAGMENTS"):
                for frag in value.split():
                    if not (TOP / "kernel/fragments" / frag).is_file():
                        err(rel(p), f"{name}: kernel/fragments/{frag} does not exist")
            if name.startswith(("RTCAT_MAINLINE_PATCHES", "RTCAT_BSP_PATCHES")):
                # The series is chosen from the kernel's version (kernel/patch-series.sh); with
                # the version in the recipe itself, the choice is checked here too.
                sel = re.fullmatch(r"\$\{@rtcat\.kernel_patch_series\(d, '(mainline-rt|bsp-rt)'\)\}", value)
                series = [value]
                if sel:
                    ver = re.search(r'^LINUX_VERSION \??=\s*"([^"$]+)"', text, re.M)
                    if ver:
                        r = subprocess.run(
                            [
                                "bash",
                                str(TOP / "kernel/patch-series.sh"),
                                "--flavour",
                                sel.group(1),
                                "--version",
                                ver.group(1),
                                "--name",
                            ],
                            capture_output=True,
                            text=True,
                        )
                        if r.returncode != 0:
                            err(rel(p), f"{name}: {r.stderr.strip()}")
                        series = [r.stdout.strip()] if r.returncode == 0 else []
                    else:
                        prefix = sel.group(1).split("-")[0]
                        series = sorted(d.name for d in (TOP / "kernel/patches").glob(prefix + "-*") if d.is_dir())
                elif "${" in value:
                    err(
                        rel(p),
                        f"{name}: {value!r} is neither a kernel/patches/ directory nor "
                        "${@rtcat.kernel_patch_series(d, FLAVOUR)}",
                    )
                    series = []
                for value in series:
                    d = TOP / "kernel/patches" / value
                    if not d.is_dir() or not any(d.glob("*.patch")):
                        err(rel(p), f"{name}: kernel/patches/{value}/ has no *.patch (the stmmac patch series)")
                    else:
                        for patch in sorted(d.glob("*.patch")):
                            if not re.search(r"^Upstream-Status: ", patch.read_text(errors="replace"), re.M):
                                err(rel(patch), "no Upstream-Status: line")
            if name.startswith("RTCAT_GMAC_OVERLAY") and not (TOP / "dts" / value).is_file():
                err(rel(p), f"{name}: dts/{value} does not exist")
    # The vendor kernel is pinned once more by kernel/build.sh (kernel/sources.env): same tree.
    env = (
        dict(re.findall(r"^(BSP_GIT_\w+)=(\S+)", (TOP / "kernel/sources.env").read_text(), re.M))
        if (TOP / "kernel/sources.env").is_file()
        else {}
    )
    bsp = LAYER / "recipes-kernel/linux/linux-rockchip-rt_5.10.bb"
    if env and bsp.is_file():
        text = bsp.read_text()
        rev = re.search(r'^SRCREV = "([0-9a-f]{40})"', text, re.M)
        if not rev or rev.group(1) != env.get("BSP_GIT_COMMIT"):
            err(
                rel(bsp),
                f"SRCREV: {rev and rev.group(1)} differs from BSP_GIT_COMMIT "
                f"{env.get('BSP_GIT_COMMIT')} in kernel/sources.env",
            )
        for key, field in (("BSP_GIT_URL", "url"), ("BSP_GIT_BRANCH", "branch")):
            val = env.get(key, "")
            if field == "url":
                val = re.sub(r"^https://", "git://", val)
            if val and val not in text:
                err(rel(bsp), f"SRC_URI: does not use {key}={env.get(key)} of kernel/sources.env")
    if not errors:
        print(f"recipes: {len(recipes)} recipes/appends, {n_files} local files found, {n_lic} license checksums match")


def check_sysctl(path):
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        m = re.fullmatch(r"-?([a-z0-9_.*/-]+)\s*=\s*(\S.*)", s)
        if not m:
            err(f"{rel(path)}:{n}", f"not 'key = value': {s!r}")
            continue
        proc = Path("/proc/sys") / m.group(1).replace(".", "/")
        if not proc.exists():
            print(f"note: {rel(path)}:{n}: {m.group(1)} does not exist on this kernel")
    if not errors:
        print(f"sysctl: {rel(path)}: syntax OK")


# ---------------------------------------------------------------------------------------------
# The EtherCAT port's name per machine: udev (.link) and networkd (.network), offline.
BOARDS = LAYER / "recipes-rtcat/rtcat-board/files"
OVERLAY_NET = TOP / "rootfs-overlay/usr/lib/systemd/network"
LINK_SECTIONS = {"Match", "Link"}
# 20-rtcat-maintenance.network without its Kind=!* line, for the networkd check's veth port
MAINT_STAND_IN = "21-rtcat-maintenance-on-veth.network"
SYSCTL_ECAT = TOP / "rootfs-overlay/usr/lib/sysctl.d/61-rtcat-ethercat.conf"


def ini(text):
    """(section, key, value, line) of a systemd unit-style file, comments and blanks skipped."""
    section, out = None, []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        m = re.fullmatch(r"\[([A-Za-z0-9]+)\]", s)
        if m:
            section = m.group(1)
            continue
        k, eq, v = s.partition("=")
        out.append((section, k.strip() if eq else s, v.strip(), n))
    return out


def board_links():
    return {p.parent.name: p for p in sorted(BOARDS.glob("*/10-rtcat-ethercat.link"))}


def shipped_iface():
    with open(TOP / "rootfs-overlay/etc/rtcat/rtcat.toml", "rb") as f:
        return tomllib.load(f)["bus"]["interface"]


def in_namespace(*args):
    """Run this script's subcommand ARGS in a new mount and network namespace (root); JSON out."""
    r = subprocess.run(
        ["unshare", "--mount", "--net", sys.executable, __file__, *args], capture_output=True, text=True, timeout=120
    )
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"exit {r.returncode}: {r.stdout[-400:]} {r.stderr[-800:]}"}


def fake_sysfs(devpath, kname, ifindex, mount=True):
    """Put device DEVPATH (/devices/...) with net/KNAME under it into a fake /sys (a tmpfs,
    mounted by the first call), shaped like the kernel's: platform and PCI devices with their
    subsystem and driver links, a uevent everywhere (what udev's sd-device and path_id read)."""
    if mount:
        subprocess.run(["mount", "-t", "tmpfs", "rtcat-fake-sysfs", "/sys"], check=True)
        for d in ("bus/platform/drivers/rtcat-fake", "bus/pci/drivers/rtcat-fake", "class/net"):
            os.makedirs(f"/sys/{d}", exist_ok=True)
    parts = devpath.strip("/").split("/")
    assert parts[0] == "devices", devpath
    cur = "/sys/devices"
    for i, name in enumerate(parts[1:], 1):
        cur = f"{cur}/{name}"
        if os.path.isdir(cur):
            continue
        os.makedirs(cur)
        up = "../" * (i + 1)
        if parts[1] == "platform" and i == 2:
            sub = "platform"
        elif re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name):
            sub = "pci"
        else:
            sub = None  # the platform bus itself, a PCI host bridge (pciDDDD:BB)
        with open(f"{cur}/uevent", "w") as f:
            if sub:
                os.symlink(f"{up}bus/{sub}", f"{cur}/subsystem")
                os.symlink(f"{up}bus/{sub}/drivers/rtcat-fake", f"{cur}/driver")
                f.write("DRIVER=rtcat-fake\n" + (f"PCI_SLOT_NAME={name}\n" if sub == "pci" else ""))
    net = f"{cur}/net/{kname}"
    os.makedirs(net)
    os.symlink("../" * (len(parts) + 1) + "class/net", f"{net}/subsystem")
    os.symlink("../..", f"{net}/device")
    # name_assign_type 1 = NET_NAME_ENUM: named by the kernel, so udev may rename it
    for k, v in (
        ("uevent", f"INTERFACE={kname}\nIFINDEX={ifindex}\n"),
        ("ifindex", ifindex),
        ("type", 1),
        ("name_assign_type", 1),
        ("addr_assign_type", 0),
        ("iflink", ifindex),
    ):
        with open(f"{net}/{k}", "w") as f:
            f.write(f"{v}\n")
    os.symlink(f"../../{devpath.strip('/')}/net/{kname}", f"/sys/class/net/{kname}")
    return net


def private_config(links, networks=()):
    """udev and networkd see only LINKS and NETWORKS (plus systemd's own 99-default.link) and
    no rules of this host's /etc. Everything lives on tmpfs mounts of the namespace."""
    subprocess.run(["mount", "-t", "tmpfs", "rtcat-run", "/run"], check=True)
    d = tempfile.mkdtemp(prefix="rtcat-net-", dir="/run")
    os.chmod(d, 0o755)  # networkd reads it as the systemd-network user
    for p in [Path("/usr/lib/systemd/network/99-default.link"), *links]:
        shutil.copy(p, d)
    for name, text in networks:
        Path(d, name).write_text(text)
    for p in Path(d).iterdir():
        os.chmod(p, 0o644)
    subprocess.run(["mount", "--bind", d, "/usr/lib/systemd/network"], check=True)
    for m in ("/etc/systemd/network", "/etc/udev/rules.d"):
        if os.path.isdir(m):
            subprocess.run(["mount", "-t", "tmpfs", "rtcat-empty", m], check=True)


def ip_json(what, *args):
    return json.loads(
        subprocess.run(["ip", "-j", what, "show", *args], check=True, capture_output=True, text=True).stdout
    )


def ifindex_of(name):
    return ip_json("link", "dev", name)[0]["ifindex"]


def udev_add(devpath, kname):
    """Create KNAME (a veth; udev renames it as it would the board's NIC), put it at DEVPATH in
    the fake sysfs, run udevadm test --action=add on it. Returns (name, link file, log)."""
    subprocess.run(["ip", "link", "add", kname, "type", "veth", "peer", "name", f"p{kname}"], check=True)
    idx = ifindex_of(kname)
    fake_sysfs(devpath, kname, idx)
    env = dict(os.environ, SYSTEMD_DEVICE_VERIFY_SYSFS="0", SYSTEMD_LOG_LEVEL="debug")
    r = subprocess.run(
        ["udevadm", "test", "--action=add", f"/sys/class/net/{kname}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    name = next(i["ifname"] for i in ip_json("link") if i["ifindex"] == idx)
    lf = re.findall(r"^ID_NET_LINK_FILE=(.*)$", r.stdout, re.M)
    return name, (lf[-1] if lf else ""), r.stdout + r.stderr


def cmd_udev_case(args):
    """In the namespaces: one NIC at DEVPATH, the given .link files."""
    devpath, links = args[0], [Path(a) for a in args[1:]]
    private_config(links)
    name, lf, log = udev_add(devpath, "eth0")
    warn = [ln for ln in log.splitlines() if "10-rtcat-ethercat.link:" in ln]
    print(json.dumps({"name": name, "link_file": lf, "warnings": warn}))


def check_links():
    iface = shipped_iface()
    boards = board_links()
    if not boards:
        err(rel(BOARDS), "no machine has a 10-rtcat-ethercat.link")
    n_cases = 0
    for machine, p in boards.items():
        text = p.read_text()
        where = rel(p)
        entries = ini(text)
        for s, k, _v, n in entries:
            if s not in LINK_SECTIONS:
                err(f"{where}:{n}", f"{k}: outside [Match]/[Link] (section {s})")
        match = [(k, v) for s, k, v, _ in entries if s == "Match"]
        if not any(k == "Path" for k, _ in match):
            err(where, "[Match]: no Path= (the port is matched by its hardware path)")
        ports = re.findall(r"^# ethercat-port: (\S+)$", text, re.M)
        others = re.findall(r"^# other-port: (\S+)$", text, re.M)
        if not ports:
            err(where, "no '# ethercat-port: /devices/...' line: where the board's EtherCAT port is in sysfs")
        for dev in ports:
            got = in_namespace("udev-case", dev, str(p))
            n_cases += 1
            if (
                got.get("error")
                or got["name"] != iface
                or not got["link_file"].endswith("/10-rtcat-ethercat.link")
                or got["warnings"]
            ):
                err(where, f"the port at {dev} is not named {iface} by this file: {got}")
            else:
                print(f"links: {machine}: {dev} -> {got['name']} ({got['link_file']})")
            # negative control: without the file, udev's defaults do not give it the name
            got = in_namespace("udev-case", dev)
            n_cases += 1
            if got.get("error") or got["name"] == iface:
                err(where, f"negative control: without this file the port at {dev} is still named {iface}: {got}")
            else:
                print(f"links: {machine}: without the .link, {dev} -> {got['name']} (not {iface}, as it must)")
        for dev in others:
            got = in_namespace("udev-case", dev, str(p))
            n_cases += 1
            if got.get("error") or got["name"] == iface:
                err(where, f"another port, {dev}, is named {iface} too: {got}")
            else:
                print(f"links: {machine}: other port {dev} -> {got['name']}")
    if not errors:
        print(
            f"links: {len(boards)} machines, {n_cases} udev runs: every EtherCAT port named {iface}, "
            f"no other port, and none without its .link"
        )


def cmd_networkd_case(args):
    """In the namespaces: the board's EtherCAT port (renamed by its .link) and a maintenance
    port, both initialised by udev, then systemd-networkd with the image's .network files."""
    link, ecat_dev, maint_dev = Path(args[0]), args[1], args[2]
    # The test's NICs are veths (Kind=veth), which the maintenance file's Kind=!* (physical ports
    # only) excludes, as it must: networkd parses the real file (its warnings count) and skips the
    # test's port, and a copy without that line, sorted after it, stands in for it on a real NIC.
    nets = [(p.name, p.read_text()) for p in sorted(OVERLAY_NET.glob("*.network"))]
    maint_text = (OVERLAY_NET / "20-rtcat-maintenance.network").read_text()
    nets.append((MAINT_STAND_IN, re.sub(r"^Kind=!\*\n", "", maint_text, flags=re.M)))
    private_config([link], nets)
    # the EtherCAT port and the maintenance port, where the board has them
    subprocess.run(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peth0"], check=True)
    subprocess.run(["ip", "link", "add", "eth1", "type", "veth", "peer", "name", "peth1"], check=True)
    i0, i1 = ifindex_of("eth0"), ifindex_of("eth1")
    fake_sysfs(ecat_dev, "eth0", i0)
    fake_sysfs(maint_dev, "eth1", i1, mount=False)
    env = dict(os.environ, SYSTEMD_DEVICE_VERIFY_SYSFS="0")
    logs = ""
    for k in ("eth0", "eth1"):
        logs += subprocess.run(
            ["udevadm", "test", "--action=add", f"/sys/class/net/{k}"], capture_output=True, text=True, env=env
        ).stderr
    names = {i["ifindex"]: i["ifname"] for i in ip_json("link")}
    # the fake sysfs follows the rename (the kernel renames its sysfs entry; ours is a tmpfs)
    for idx, dev, old in ((i0, ecat_dev, "eth0"), (i1, maint_dev, "eth1")):
        new = names[idx]
        if new != old:
            base = f"/sys/{dev.strip('/')}/net"
            os.rename(f"{base}/{old}", f"{base}/{new}")
            Path(f"{base}/{new}/uevent").write_text(f"INTERFACE={new}\nIFINDEX={idx}\n")
            os.unlink(f"/sys/class/net/{old}")
            os.symlink(f"../../{dev.strip('/')}/net/{new}", f"/sys/class/net/{new}")
    # what udev's 99-systemd.rules runs for every new link, after the rename: the sysctl.d keys of
    # that name (61-rtcat-ethercat.conf: no IPv6 on the EtherCAT port)
    for idx in (i0, i1):
        pre = [f"--prefix=/net/ipv6/conf/{names[idx]}", f"--prefix=/net/ipv4/conf/{names[idx]}"]
        subprocess.run(["/lib/systemd/systemd-sysctl", *pre, str(SYSCTL_ECAT)], check=True)
    # udev's part is done: with /sys read-only networkd takes the links as initialised (the
    # container rule of systemd's udev_available()) instead of waiting for a udevd to announce them.
    subprocess.run(["mount", "-o", "remount,ro", "/sys"], check=True)
    for p in ("peth0", "peth1"):
        subprocess.run(["ip", "link", "set", p, "up"], check=True)
    for d in ("/run/systemd/netif", "/run/systemd/netif/links", "/run/systemd/netif/leases"):
        os.makedirs(d, exist_ok=True)
        shutil.chown(d, "systemd-network", "systemd-network")  # networkd runs as that user
    nd = subprocess.Popen(
        ["/lib/systemd/systemd-networkd"],
        env=dict(env, SYSTEMD_LOG_LEVEL="debug"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def snapshot():
        addrs = {i["ifindex"]: [f"{a['family']} {a['local']}" for a in i.get("addr_info", [])] for i in ip_json("addr")}
        flags = {i["ifindex"]: i.get("flags", []) for i in ip_json("link")}
        st = {}
        for idx in (i0, i1):
            f = Path(f"/run/systemd/netif/links/{idx}")
            kv = dict(ln.split("=", 1) for ln in f.read_text().splitlines() if "=" in ln) if f.exists() else {}
            v6 = Path(f"/proc/sys/net/ipv6/conf/{names[idx]}/disable_ipv6")
            st[names[idx]] = {
                "network_file": kv.get("NETWORK_FILE", ""),
                "admin": kv.get("ADMIN_STATE", ""),
                "flags": flags.get(idx, []),
                "addresses": addrs.get(idx, []),
                "disable_ipv6": v6.read_text().strip() if v6.exists() else "absent",
            }
        return st

    try:
        # until the maintenance port has its IPv6 link-local address (the first address any
        # configuration gives), then 3 s more: an address on the EtherCAT port would be there by then
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.5)
            st = snapshot()
            if any(a.startswith("inet6 fe80") for a in st[names[i1]]["addresses"]):
                time.sleep(3)
                break
        st = snapshot()
    finally:
        nd.terminate()
        out = nd.communicate(timeout=10)[0]
    warn = [ln for ln in (out + logs).splitlines() if re.search(r"rtcat-[a-z]+\.(network|link):\d+", ln)]
    if os.environ.get("RTCAT_NETWORKD_LOG"):
        Path(os.environ["RTCAT_NETWORKD_LOG"]).write_text(out)
    print(json.dumps({"ecat": names[i0], "maint": names[i1], "state": st, "warnings": warn}))


def check_networks():
    iface = shipped_iface()
    boards = board_links()
    # the EVB: a GMAC EtherCAT port and a PCIe second port (the maintenance way in)
    machine = "rockchip-rk3588-evb"
    link = boards.get(machine)
    if not link:
        err(rel(BOARDS), f"no {machine}/10-rtcat-ethercat.link for the networkd check")
        return
    text = link.read_text()
    ecat = re.findall(r"^# ethercat-port: (\S+)$", text, re.M)[0]
    maint = re.findall(r"^# other-port: (\S+)$", text, re.M)[0]
    if not re.search(r"^Kind=!\*$", (OVERLAY_NET / "20-rtcat-maintenance.network").read_text(), re.M):
        err(
            rel(OVERLAY_NET / "20-rtcat-maintenance.network"),
            "[Match]: no Kind=!* (virtual links such as veth must stay out)",
        )
    got = in_namespace("networkd-case", str(link), ecat, maint)
    if got.get("error"):
        err("networkd", got["error"])
        return
    e, m = got["state"].get(got["ecat"], {}), got["state"].get(got["maint"], {})
    where = rel(OVERLAY_NET)
    if got["ecat"] != iface:
        err(where, f"the EtherCAT port is {got['ecat']!r}, not {iface}")
    if not e.get("network_file", "").endswith("/10-rtcat-ethercat.network") or e.get("admin") != "configured":
        err(where, f"{iface}: not configured by 10-rtcat-ethercat.network: {e}")
    if e.get("addresses"):
        err(where, f"{iface}: has addresses {e['addresses']} (the EtherCAT port carries no IP)")
    if e.get("disable_ipv6") != "1":
        err(
            where,
            f"{iface}: disable_ipv6 is {e.get('disable_ipv6')} after networkd ran (61-rtcat-ethercat.conf sets 1)",
        )
    if "UP" not in e.get("flags", []) or "NOARP" not in e.get("flags", []):
        err(where, f"{iface}: flags {e.get('flags')} (want UP by ActivationPolicy=always-up, NOARP)")
    if not m.get("network_file", "").endswith("/" + MAINT_STAND_IN) or not any(
        a.startswith("inet6 fe80") for a in m.get("addresses", [])
    ):
        err(
            where,
            f"maintenance port {got['maint']}: not configured by 20-rtcat-maintenance.network "
            f"(less Kind=!*, as {MAINT_STAND_IN}) with a link-local address: {m}",
        )
    for w in got["warnings"]:
        err(where, f"systemd-networkd/udev: {w}")
    if not errors:
        print(
            f"networks: {iface}: {e['network_file']}, flags {','.join(e['flags'])}, no address, "
            f"disable_ipv6 {e['disable_ipv6']}; "
            f"maintenance {got['maint']}: not 20-rtcat-maintenance.network (a veth: Kind=!*), "
            f"{m['network_file']} (the same less Kind=!*), addresses {m['addresses']}"
        )


def check_rootfs():
    """What the image installs, per machine of the kas files (bitbake is not run here)."""
    iface = shipped_iface()
    machines = sorted(
        {
            load_yaml(p).get("machine")
            for p in KAS.glob("*.yml")
            if not p.name.endswith(".lock.yml") and load_yaml(p).get("machine")
        }
    )
    image = (LAYER / "recipes-rtcat/images/rtcat-image.bb").read_text()
    install = re.search(r'^IMAGE_INSTALL = "([^"]*)"', re.sub(r"\\\n", " ", image), re.M)
    pkgs = set(install.group(1).split()) if install else set()
    if "rtcat-board" not in pkgs:
        err(
            "yocto-layer/recipes-rtcat/images/rtcat-image.bb",
            "IMAGE_INSTALL: no rtcat-board (the .link of the machine)",
        )
    recipes = {re.sub(r"_[^_]*$", "", p.stem): p for p in LAYER.glob("recipes-rtcat/*/*.bb")}
    for machine in machines:
        links = []
        for pn in sorted(pkgs & set(recipes)):
            text = re.sub(r"\\\n", " ", recipes[pn].read_text())
            files = " ".join(v for k, v in recipe_vars(text) if k.startswith("FILES:"))
            for m in re.finditer(r"install -m \S+ (\S+\.link) (\S+)", text):
                src, dst = m.group(1), m.group(2)
                dst = dst.rstrip("/") + "/" + os.path.basename(src) if dst.endswith("/") else dst
                dst = dst.replace("${D}", "")
                if dst not in files.split():
                    err(rel(recipes[pn]), f"{dst} is installed but not in FILES:${{PN}}")
                # FILESPATH: files/${MACHINE}/ of the recipe (the only place rtcat-board takes it from)
                local = recipes[pn].parent / "files" / machine / os.path.basename(src)
                if not local.is_file():
                    err(rel(recipes[pn]), f"MACHINE {machine}: no files/{machine}/{os.path.basename(src)}")
                    continue
                if re.search(rf"^Name={re.escape(iface)}$", local.read_text(), re.M):
                    links.append((pn, dst, rel(local)))
        if len(links) != 1:
            err(f"MACHINE {machine}", f"{len(links)} .link files in the rootfs name {iface}, want exactly 1: {links}")
        else:
            print(f"rootfs: {machine}: one .link for {iface}: {links[0][1]} from {links[0][2]} ({links[0][0]})")


def check_cross():
    with open(TOP / "Cross.toml", "rb") as f:
        c = tomllib.load(f)
    if "aarch64-unknown-linux-gnu" not in c.get("target", {}):
        err("Cross.toml", "target.aarch64-unknown-linux-gnu missing")


def main():
    global RTCAT_BIN
    argv = sys.argv[1:]
    if argv[:1] == ["--rtcat"] and len(argv) >= 2:
        RTCAT_BIN, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "kas":
        check_kas()
    elif cmd == "readme":
        check_readme()
    elif cmd == "config":
        check_config(Path(args[0]) if args else TOP / "rootfs-overlay/etc/rtcat/rtcat.toml")
    elif cmd == "example":
        check_example()
    elif cmd == "cross":
        check_cross()
    elif cmd == "recipes":
        check_recipes()
    elif cmd == "sysctl":
        check_sysctl(Path(args[0]).resolve())
    elif cmd == "links":
        check_links()
    elif cmd == "networks":
        check_networks()
    elif cmd == "rootfs":
        check_rootfs()
    elif cmd == "udev-case":
        cmd_udev_case(args)
        return 0
    elif cmd == "networkd-case":
        cmd_networkd_case(args)
        return 0
    else:
        print(f"image_checks.py: unknown check {cmd!r}", file=sys.stderr)
        return 2
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
