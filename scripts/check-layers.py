#!/usr/bin/env python3
"""Fails when a crate's module imports from a layer above its own, or when modules import each
other in a circle.

A crate's layers are its top-level folders under src/, listed below from top to bottom
(docs/ARCHITECTURE.md says what each owns). Every `crate::...` path outside `#[cfg(test)]` code
is resolved to the module file that defines it (through the crate root's `pub use`
re-exports); `super::` and `self::` paths are resolved too. A path into a higher layer fails
unless the line before it is a comment starting `// layers: upward because`, so the exceptions
are few and each says why. Tests may import from anywhere: they sit beside what they test.

    python3 scripts/check-layers.py [--root DIR]     (exit 1 and a list of offences, or 0)
"""

import argparse
import os
import re
import sys

# Top to bottom. The crate root (lib.rs) declares the layers and may name any of them.
LAYERS = {
    "tern-server": ["startup", "transport", "wire", "ops", "state", "config"],
    "tern-store": ["store", "mechanics"],
}
UPWARD_MARK = "// layers: upward because"


def module_of(src, path):
    """`transport/uring/mod.rs` -> ("transport", "uring"); `lib.rs` -> ()."""
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


def non_test_lines(text):
    """The file's lines up to its first `#[cfg(test)]` item (tests come last in this project),
    with block comments and line comments other than the upward mark blanked out."""
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("#[cfg(test)]"):
            break
        stripped = line.strip()
        if stripped.startswith("//") and not stripped.startswith(UPWARD_MARK):
            lines.append("")
        else:
            lines.append(line)
    return lines


def root_reexports(lib_text):
    """Names the crate root re-exports: `pub use a::b::{C, D as E};` -> {C: (a, b), E: (a, b)}."""
    names = {}
    for m in re.finditer(r"pub use ([\w:]+)::\{([^}]*)\};|pub use ([\w:]+)::(\w+)(?: as (\w+))?;", lib_text):
        if m.group(1):
            base = tuple(p for p in m.group(1).split("::") if p not in ("crate", "self"))
            for item in m.group(2).split(","):
                item = item.strip()
                if not item:
                    continue
                parts = item.split(" as ")
                names[parts[-1].strip()] = base
        else:
            base = tuple(p for p in m.group(3).split("::") if p not in ("crate", "self"))
            names[(m.group(5) or m.group(4))] = base
    return names


def expand_use(stmt):
    """Every path a `use` statement names, braces expanded: `crate::a::{b, c::{d}}` -> [...]."""
    stmt = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", stmt))
    m = re.search(r"\{", stmt)
    if not m:
        return [stmt]
    head, depth, i = stmt[: m.start()], 0, m.start()
    for j in range(m.start(), len(stmt)):
        depth += {"{": 1, "}": -1}.get(stmt[j], 0)
        if depth == 0:
            inner, tail = stmt[i + 1 : j], stmt[j + 1 :]
            break
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    return [p for part in parts if part for p in expand_use(head + part + tail)]


def references(lines, here):
    """(line number, absolute module path as a tuple) for each crate-internal path named."""
    refs = []
    text = "\n".join(lines)
    for m in re.finditer(r"\buse\s+((?:crate|super|self)::[^;]*);", text):
        line_no = text.count("\n", 0, m.start()) + 1
        for path in expand_use(m.group(1)):
            refs.append((line_no, path))
    for m in re.finditer(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", text):
        line_no = text.count("\n", 0, m.start()) + 1
        refs.append((line_no, m.group(1)))
    out = set()
    for line_no, path in refs:
        parts = path.split("::")
        if parts[0] == "crate":
            absolute = parts[1:]
        else:
            base = list(here)
            while parts and parts[0] in ("super", "self"):
                if parts[0] == "super":
                    base = base[:-1]
                parts = parts[1:]
            absolute = base + parts
        out.add((line_no, tuple(p for p in absolute if p not in ("*", "self"))))
    return sorted(out)


def check_crate(src, layers):
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[module_of(src, path)] = path
    reexports = root_reexports(open(files[()]).read())
    test_only = set()
    for module, path in files.items():
        for name in re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))?\s+)?mod\s+(\w+);", open(path).read()):
            test_only.add(module + (name,))
    rank = {layer: i for i, layer in enumerate(layers)}
    offences, edges = [], {}

    def resolve(path):
        if path and path[0] in reexports and path[0] not in [m[0] for m in files if m]:
            path = reexports[path[0]] + path[1:]
        for n in range(len(path), 0, -1):
            if path[:n] in files:
                return path[:n]
        return None

    for module, path in sorted(files.items()):
        if not module or any(module[:n] in test_only for n in range(1, len(module) + 1)):
            continue
        if module[0] not in rank:
            offences.append(f"{path}: module outside every layer ({', '.join(layers)})")
            continue
        lines = non_test_lines(open(path).read())
        upward = set()
        for line_no, target in references(lines, module):
            target = resolve(target)
            if target is None or target == module or not target:
                continue
            edges.setdefault(module, set()).add(target)
            if target[0] in rank and rank[target[0]] < rank[module[0]] and (line_no, target) not in upward:
                upward.add((line_no, target))
                previous = lines[line_no - 2].strip() if line_no >= 2 else ""
                if not previous.startswith(UPWARD_MARK):
                    offences.append(
                        f"{path}:{line_no}: {'::'.join(module)} ({module[0]}) imports "
                        f"{'::'.join(target)} from the higher layer {target[0]}"
                    )
    for cycle in cycles(edges):
        offences.append("circle: " + " -> ".join("::".join(m) for m in cycle + [cycle[0]]))
    return offences


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def self_test():
    """The checker on small made-up crates: each offence it must find, and a clean tree."""
    import tempfile

    def run(tree):
        with tempfile.TemporaryDirectory() as src:
            for rel, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                with open(os.path.join(src, rel), "w") as f:
                    f.write(text)
            return check_crate(src, ["top", "bottom"])

    base = {
        "lib.rs": "mod top;\nmod bottom;\npub use bottom::low::Low;\n#[cfg(test)]\nmod tests;\n",
        "top/mod.rs": "pub mod high;\npub mod other;\npub mod lone;\n",
        "top/lone.rs": "pub struct Lone;\n",
        "top/high.rs": "use crate::bottom::low::Low;\nuse crate::Low as L;\nuse super::other::O;\n",
        "top/other.rs": "use crate::{bottom::{low::Low}};\npub struct O;\n",
        "bottom/mod.rs": "pub mod low;\n",
        "bottom/low.rs": "pub struct Low;\n#[cfg(test)]\nmod tests { use crate::top::high; }\n",
        "tests.rs": "use crate::top::high;\n",
    }
    cases = [
        ("clean", {}, 0),
        ("upward use", {"bottom/low.rs": "use crate::top::lone::Lone;\n"}, 1),
        ("upward path in code", {"bottom/low.rs": "fn f() { crate::top::lone::Lone; }\n"}, 1),
        ("upward in braces", {"bottom/low.rs": "use crate::{top::{lone::Lone}};\n"}, 1),
        ("upward via super", {"bottom/low.rs": "use super::super::top::lone::Lone;\n"}, 1),
        ("upward with its reason", {"bottom/low.rs": "// layers: upward because a test says so\nuse crate::top::lone::Lone;\n"}, 0),
        ("upward closing a circle", {"bottom/low.rs": "// layers: upward because a test says so\nuse crate::top::high::H;\n"}, 1),
        ("circle in a layer", {"top/other.rs": "use super::high::H;\n"}, 1),
        ("module outside the layers", {"loose.rs": "\n"}, 1),
    ]
    failed = 0
    for name, change, expected in cases:
        found = run({**base, **change})
        if len(found) != expected:
            failed += 1
            print(f"self-test {name!r}: expected {expected} offences, found {found}")
    print(f"check-layers self-test: {len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--self-test", action="store_true", help="check the checker first")
    args = parser.parse_args()
    if args.self_test and self_test():
        return 1
    offences = []
    for crate, layers in LAYERS.items():
        offences += check_crate(os.path.join(args.root, "crates", crate, "src"), layers)
    for offence in offences:
        print(offence)
    if offences:
        print(f"{len(offences)} layer offences (scripts/check-layers.py; docs/ARCHITECTURE.md)")
        return 1
    print("layers: every import points down, no circles (" + ", ".join(LAYERS) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
