#!/usr/bin/env python3
"""The module import graph of one Rust crate, drawn from its `crate::`/`super::`/`self::` paths.

Prints what a newcomer trips over (issue 27): the files in import circles (strongly connected
components of more than one file), the imports running back up (against an order of the files
that puts as few imports against it as the greedy heuristic of Eades, Lin and Smyth finds, so
every import in a circle is counted once per circle it closes, not once per file), the longest
functions, and the public item count.

Nodes are files (`src/coe/segment.rs` is `coe::segment`, `src/coe/mod.rs` is `coe`); `lib.rs` is
not a node: a path through the crate root's `pub use` facade (`crate::Result`) counts as an
import of the module the name comes from. Comments, string literals and test code (files named
`tests.rs`, items under `#[cfg(test)]`) are left out. A path names the longest module prefix it
has (`crate::coe::segment::Foo` imports `coe::segment`, `crate::coe::Client` imports `coe`).

Public items are `pub` (not `pub(crate)`) fn, struct, enum, trait, const, static, type, mod, use
and union items outside test code; fields and methods of traits are not items of their own here,
but `pub fn` in an `impl` block is.

`--why` lists the imports inside circles with one path each; `--no-circles` exits 1 when there
are any.

Usage: ci/py/rust_modgraph.py [--json] [--why] [--no-circles] [--top N] CRATE_SRC_DIR      (e.g. app/master/src)
"""

import json
import re
import sys
from pathlib import Path

ITEM_KW = r"(?:fn|struct|enum|trait|const|static|type|mod|use|union)"
PUB_ITEM = re.compile(r"(?m)^[ \t]*pub[ \t]+(?:(?:unsafe|const|async|extern[ \t]+\"C\")[ \t]+)*" + ITEM_KW + r"\b")
FN_DEF = re.compile(r"\bfn[ \t]+([A-Za-z_][A-Za-z0-9_]*)")


def strip(src):
    """The source with comments and string/char literals blanked (newlines kept, so line
    numbers and brace structure survive)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif (
            c in "rb" and re.match(r"(?:br|r)#*\"", src[i:]) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_"))
        ):
            m = re.match(r"(?:br|r)(#*)\"", src[i:])
            end = src.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", src[i + 1 : j]) + '"')
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a): a literal closes
            # with a quote right after one (escaped) character.
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", src[i:])
            if m:
                out.append("' '" + " " * (m.end() - 3))
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code, open_idx):
    """The index just past the brace block that opens at `open_idx`."""
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def drop_tests(code):
    """Blank the items under `#[cfg(test)]` (or `cfg(all(test, …))`)."""
    out = code
    for m in reversed(list(re.finditer(r"#\[cfg\((?:all\()?test\b[^\]]*\]", code))):
        k = m.end()
        semi, brace = code.find(";", k), code.find("{", k)
        end = block_end(code, brace) if brace >= 0 and (semi < 0 or brace < semi) else semi + 1
        out = out[: m.start()] + re.sub(r"[^\n]", " ", out[m.start() : end]) + out[end:]
    return out


def module_of(root, path):
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return "::".join(parts)


def expand_use(tree):
    """`a::{b, c::{d, self}}` → ["a::b", "a::c::d", "a::c"]."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    depth, cut = 0, -1
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                cut = k
            depth += 1
        elif ch == "}":
            depth -= 1
    if cut < 0:
        tree = re.sub(r"::self$", "", tree)
        return [tree.removesuffix("::*")]
    prefix, inner = tree[:cut], tree[cut + 1 : tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    res = []
    for p in filter(None, parts):
        for e in expand_use(p):
            res.append(prefix.rstrip(":") if e == "self" else prefix + e)
    return res


def paths_in(code):
    """Every `crate::`/`super::`/`self::` path of the code, `use` trees expanded."""
    found = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", code):
        found += expand_use(m.group(1))
    rest = re.sub(r"\buse\s+(?:crate|super|self)\b[^;]*;", "", code)
    found += re.findall(r"\b(?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+", rest)
    return found


def resolve(path, here, modules, facade):
    """The module (file) a path imports, or None (itself, the crate root's own items)."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    else:
        base = here.split("::") if here else []
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    full = base + segs
    best = None
    for k in range(1, len(full) + 1):
        if "::".join(full[:k]) in modules:
            best = "::".join(full[:k])
    if best is None and full and full[0] in facade:
        best = facade[full[0]]
    return best if best != here else None


def functions(code, module):
    """(lines, name) of every fn body."""
    res = []
    for m in FN_DEF.finditer(code):
        k = m.end()
        depth = 0
        # The body starts at the first `{` outside the signature's brackets; a `;` first means
        # a declaration without body (trait method, extern).
        while k < len(code):
            ch = code[k]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1 if not (ch == ">" and code[k - 1] == "-") else 0
            elif ch == ";" and depth <= 0:
                k = -1
                break
            elif ch == "{" and depth <= 0:
                break
            k += 1
        if k < 0 or k >= len(code):
            continue
        end = block_end(code, k)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        res.append((last - first + 1, f"{module}::{m.group(1)}" if module else m.group(1), first))
    return res


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def greedy_order(nodes, edges):
    """Eades–Lin–Smyth: an order of the nodes with few edges running against it (dependencies
    last: an importer comes before what it imports)."""
    succ = {v: set(edges.get(v, ())) for v in nodes}
    pred = {v: set() for v in nodes}
    for v, ws in succ.items():
        for w in ws:
            pred[w].add(v)
    left, s1, s2 = set(nodes), [], []
    while left:
        changed = True
        while changed:
            changed = False
            for v in sorted(left):
                if not (succ[v] & left):
                    s2.insert(0, v)
                    left.discard(v)
                    changed = True
            for v in sorted(left):
                if not (pred[v] & left):
                    s1.append(v)
                    left.discard(v)
                    changed = True
        if left:
            v = max(sorted(left), key=lambda u: len(succ[u] & left) - len(pred[u] & left))
            s1.append(v)
            left.discard(v)
    return s1 + s2


def analyse(root):
    root = Path(root)
    files = sorted(p for p in root.rglob("*.rs") if p.name != "tests.rs")
    codes = {}
    for p in files:
        codes[p] = drop_tests(strip(p.read_text()))
    lib = root / "lib.rs"
    modules = {module_of(root, p) for p in files if p != lib}
    # Declared but test-only modules (e.g. `#[cfg(test)] mod proptests;`) vanish with the
    # test code; files no longer declared anywhere are still counted (cheap and rare).
    facade = {}
    if lib in codes:
        for m in re.finditer(r"\bpub\s+use\s+([^;]*);", codes[lib]):
            for path in expand_use(m.group(1)):
                segs = path.split("::")
                name = re.sub(r"\bas\b.*", "", segs[-1])
                mod = None
                for k in range(1, len(segs)):
                    if "::".join(segs[:k]) in modules:
                        mod = "::".join(segs[:k])
                if mod:
                    facade[name] = mod
    edges, why, fns, pub = {}, {}, [], 0
    for p in files:
        here = module_of(root, p)
        code = codes[p]
        pub += len(PUB_ITEM.findall(code))
        fns += functions(code, here)
        if p == lib:
            continue
        for path in paths_in(code):
            tgt = resolve(path, here, modules, facade)
            if tgt:
                edges.setdefault(here, set()).add(tgt)
                why.setdefault((here, tgt), path)
    comps = [c for c in sccs(modules, edges) if len(c) > 1]
    order = greedy_order(modules, edges)
    pos = {v: k for k, v in enumerate(order)}
    back = sorted((v, w) for v, ws in edges.items() for w in ws if pos[w] < pos[v])
    n_edges = sum(len(ws) for ws in edges.values())
    fns.sort(key=lambda f: (-f[0], f[1]))
    return {
        "files": len(modules),
        "imports": n_edges,
        "circles": comps,
        "files_in_circles": sum(len(c) for c in comps),
        "back_imports": [f"{v} -> {w}" for v, w in back],
        "circle_imports": [
            f"{v} -> {w} ({why[v, w]})" for c in comps for v in c for w in sorted(edges.get(v, ())) if w in c
        ],
        "order": order,
        "longest_functions": [{"name": n, "lines": ln, "line": at} for ln, n, at in fns],
        "public_items": pub,
    }


def main():
    args = sys.argv[1:]
    as_json = "--json" in args
    show_why = "--why" in args
    no_circles = "--no-circles" in args
    args = [a for a in args if a not in ("--json", "--why", "--no-circles")]
    top = 10
    if "--top" in args:
        k = args.index("--top")
        top = int(args[k + 1])
        del args[k : k + 2]
    if len(args) != 1 or not Path(args[0]).is_dir():
        sys.exit(__doc__.strip().splitlines()[-1])
    r = analyse(args[0])
    r["longest_functions"] = r["longest_functions"][:top]
    if as_json:
        json.dump(r, sys.stdout, indent=1)
        print()
        return
    print(f"files (modules): {r['files']}, imports (distinct file pairs): {r['imports']}")
    print(f"files in import circles: {r['files_in_circles']} of {r['files']}")
    for c in r["circles"]:
        print(f"  circle of {len(c)}: {' '.join(c)}")
    if show_why:
        print("  the imports inside circles (one path each):")
        for e in r["circle_imports"]:
            print(f"    {e}")
    print(f"imports running back up: {len(r['back_imports'])} of {r['imports']}")
    for b in r["back_imports"]:
        print(f"  {b}")
    print(f"longest functions (lines, test code excluded), top {top}:")
    for f in r["longest_functions"]:
        print(f"  {f['lines']:5d}  {f['name']} (line {f['line']})")
    print(f"public items: {r['public_items']}")
    if no_circles and r["circles"]:
        sys.exit(f"{args[0]}: {r['files_in_circles']} files in import circles (--why shows the imports)")


if __name__ == "__main__":
    main()
