#!/usr/bin/env python3
"""Static checks of the rtcat image sources, called by ci/check-image.sh.

    ci/image_checks.py kas        kas files: kas's JSON schema, every repo pinned by branch and
                                  full commit, lock files pinning exactly those commits
    ci/image_checks.py readme     yocto-layer/README.md lists every layer's URL, branch and commit
    ci/image_checks.py config [FILE]   /etc/rtcat/rtcat.toml: the config contract (types,
                                  ranges, unknown keys) and agreement with kernel/rt-cpus.env
    ci/image_checks.py recipes    every local file a recipe names exists; LIC_FILES_CHKSUM
                                  md5 sums match; every kernel fragment named exists
    ci/image_checks.py sysctl FILE     syntax of a sysctl.d snippet

Each problem is printed as "FILE: field: message"; the exit status is 1 when there is any.
"""

import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

TOP = Path(subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse",
                           "--show-toplevel"], check=True, capture_output=True, text=True).stdout.strip())
LAYER = TOP / "yocto-layer"
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
        pinned = ((load_yaml(lock).get("overrides") or {}).get("repos") or {})
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
def cpu_list(s):
    out = set()
    for item in s.split(","):
        a, _, b = item.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


SCHEMA = {
    "bus": {"interface": (str, None)},
    "cycle": {"period_us": (int, (125, 100000)), "cpu": (int, (0, 1023)), "priority": (int, (1, 99)),
              "txrx_cpu": (int, (0, 1023)), "txrx_priority": (int, (1, 99))},
    "rt": {"lock_memory": (bool, None), "hold_cpu_dma_latency": (bool, None), "timer_slack_ns": (int, (1, 10**9))},
    "segment": {"subdevices": (int, (1, 65535)), "expected_wkc": (int, (0, 65535))},
    "health": {"bad_cycles_before_recovery": (int, (1, 10**6))},
    "output": {"dir": (str, None), "samples_csv": (bool, None)},
}
OPTIONAL = {("segment", "expected_wkc")}


def check_config(path):
    where = rel(path) if str(path).startswith(str(TOP)) else str(path)
    try:
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        err(where, f"not valid TOML: {e}")
        return
    for section, fields in SCHEMA.items():
        sec = cfg.get(section)
        if not isinstance(sec, dict):
            err(where, f"[{section}]: missing")
            continue
        for key, (typ, rng) in fields.items():
            if key not in sec:
                if (section, key) not in OPTIONAL:
                    err(where, f"{section}.{key}: missing")
                continue
            v = sec[key]
            if type(v) is not typ:
                err(where, f"{section}.{key}: {v!r} is not a {typ.__name__}")
            elif rng and not rng[0] <= v <= rng[1]:
                err(where, f"{section}.{key}: {v} is outside {rng[0]}..={rng[1]}")
        for key in sec:
            if key not in fields:
                err(where, f"{section}.{key}: unknown key")
    for section in cfg:
        if section not in SCHEMA and section != "tune":
            err(where, f"[{section}]: unknown section")
    if errors:
        return
    iface = cfg["bus"]["interface"]
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", iface):
        err(where, f"bus.interface: {iface!r} is not a network interface name")
    # Agreement with the CPU sets the kernel boot arguments are generated from.
    env = {}
    for line in (TOP / "kernel/rt-cpus.env").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            env[k] = v.strip('"')
    rt, hk = cpu_list(env["RTCAT_RT_CPUS"]), cpu_list(env["RTCAT_HOUSEKEEPING_CPUS"])
    for key in ("cpu", "txrx_cpu"):
        if cfg["cycle"][key] not in rt:
            err(where, f"cycle.{key}: CPU {cfg['cycle'][key]} is not an isolated CPU "
                       f"(RTCAT_RT_CPUS={env['RTCAT_RT_CPUS']} in kernel/rt-cpus.env)")
    tune = cfg.get("tune", {})
    if "housekeeping_cpus" in tune and cpu_list(tune["housekeeping_cpus"]) != hk:
        err(where, f"tune.housekeeping_cpus: {tune['housekeeping_cpus']!r} differs from "
                   f"RTCAT_HOUSEKEEPING_CPUS={env['RTCAT_HOUSEKEEPING_CPUS']} in kernel/rt-cpus.env")
    if "nic_irq_cpu" in tune and tune["nic_irq_cpu"] not in hk:
        err(where, f"tune.nic_irq_cpu: CPU {tune['nic_irq_cpu']} is not a housekeeping CPU")
    if cfg["output"]["dir"] != "/var/lib/rtcat":
        err(where, "output.dir: the units' StateDirectory and tmpfiles.d entry are /var/lib/rtcat")
    net = (TOP / "rootfs-overlay/usr/lib/systemd/network/10-rtcat-ethercat.network").read_text()
    if not re.search(rf"^Name={re.escape(iface)}$", net, re.M):
        err("rootfs-overlay/usr/lib/systemd/network/10-rtcat-ethercat.network",
            f"[Match] Name: must be the EtherCAT NIC {iface} ([bus].interface)")
    if not errors:
        print(f"config: {where}: contract and CPU sets OK "
              f"(cpu {cfg['cycle']['cpu']} isolated, housekeeping {env['RTCAT_HOUSEKEEPING_CPUS']})")


# ---------------------------------------------------------------------------------------------
def recipe_vars(text):
    """Flatten line continuations; return (name, value) of simple assignments."""
    text = re.sub(r"\\\n", " ", text)
    for m in re.finditer(r'^([A-Za-z_][\w:${}/.-]*)\s*(?:\?\?=|\?=|:=|\+=|=\+|\.=|=)\s*"(.*)"\s*$', text, re.M):
        yield m.group(1), m.group(2)


def check_recipes():
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
                local.update(u[len("file://"):].split(";")[0] for u in value.split() if u.startswith("file://"))
        for name, value in recipe_vars(text):
            if name.startswith("SRC_URI"):
                for uri in value.split():
                    if not uri.startswith("file://") or "${" in uri:
                        continue
                    path = uri[len("file://"):].split(";")[0]
                    if not any((Path(e) / path).exists() for e in extra):
                        err(rel(p), f"SRC_URI: {uri.split(';')[0]} not found in {', '.join(extra) or 'FILESEXTRAPATHS'}")
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
                        r = subprocess.run(["bash", str(TOP / "kernel/patch-series.sh"), "--flavour", sel.group(1),
                                            "--version", ver.group(1), "--name"], capture_output=True, text=True)
                        if r.returncode != 0:
                            err(rel(p), f"{name}: {r.stderr.strip()}")
                        series = [r.stdout.strip()] if r.returncode == 0 else []
                    else:
                        prefix = sel.group(1).split("-")[0]
                        series = sorted(d.name for d in (TOP / "kernel/patches").glob(prefix + "-*") if d.is_dir())
                elif "${" in value:
                    err(rel(p), f"{name}: {value!r} is neither a kernel/patches/ directory nor "
                                "${@rtcat.kernel_patch_series(d, FLAVOUR)}")
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
    env = dict(re.findall(r"^(BSP_GIT_\w+)=(\S+)", (TOP / "kernel/sources.env").read_text(), re.M)) \
        if (TOP / "kernel/sources.env").is_file() else {}
    bsp = LAYER / "recipes-kernel/linux/linux-rockchip-rt_5.10.bb"
    if env and bsp.is_file():
        text = bsp.read_text()
        rev = re.search(r'^SRCREV = "([0-9a-f]{40})"', text, re.M)
        if not rev or rev.group(1) != env.get("BSP_GIT_COMMIT"):
            err(rel(bsp), f"SRCREV: {rev and rev.group(1)} differs from BSP_GIT_COMMIT "
                          f"{env.get('BSP_GIT_COMMIT')} in kernel/sources.env")
        for key, field in (("BSP_GIT_URL", "url"), ("BSP_GIT_BRANCH", "branch")):
            val = env.get(key, "")
            if field == "url":
                val = re.sub(r"^https://", "git://", val)
            if val and val not in text:
                err(rel(bsp), f"SRC_URI: does not use {key}={env.get(key)} of kernel/sources.env")
    if not errors:
        print(f"recipes: {len(recipes)} recipes/appends, {n_files} local files found, "
              f"{n_lic} license checksums match")


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


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "kas":
        check_kas()
    elif cmd == "readme":
        check_readme()
    elif cmd == "config":
        check_config(Path(args[0]) if args else TOP / "rootfs-overlay/etc/rtcat/rtcat.toml")
    elif cmd == "recipes":
        check_recipes()
    elif cmd == "sysctl":
        check_sysctl(Path(args[0]).resolve())
    else:
        print(f"image_checks.py: unknown check {cmd!r}", file=sys.stderr)
        return 2
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
