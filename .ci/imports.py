#!/usr/bin/env python3
"""The proxy's import picture (issue 30): which part uses which, and no cycle.

Usage: python3 .ci/imports.py [proxy/src] [-v]

Reads every module of the crate (test modules and tests.rs files left out), resolves each
`crate::`, `super::` and `self::` path to the module file it names, and prints:
- for each top-level part (a folder or a file under src/), the parts it uses;
- every two-file cycle (a pair of files in one folder using each other, which is allowed).
It exits 1 when a top-level part reaches itself (a part both below and above another) or when
more than two files are on one cycle. `-v` prints one place for each edge between parts.
"""
import collections
import os
import re
import sys

args = [a for a in sys.argv[1:] if not a.startswith("-")]
root = args[0] if args else "proxy/src"
verbose = "-v" in sys.argv

modules = {}
for folder, _, files in os.walk(root):
    for name in files:
        if name.endswith(".rs"):
            parts = os.path.relpath(os.path.join(folder, name), root)[:-3].split("/")
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            modules[tuple(parts)] = os.path.join(folder, name)

TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*\n\s*(pub(\(crate\))?\s+)?mod \w+\s*\{")
PATH = re.compile(r"\b((?:crate|super|self)(?:::\w+)+)")


def resolve(path):
    path = tuple(path)
    while path and path not in modules:
        path = path[:-1]
    return path


edges = collections.defaultdict(set)
places = {}
for module, file in modules.items():
    if module and module[-1] == "tests":
        continue
    text = open(file, encoding="utf-8").read()
    test = TEST_MODULE.search(text)
    if test:
        text = text[: test.start()]
    is_dir_module = file.endswith(("mod.rs", "lib.rs", "main.rs"))
    for number, line in enumerate(text.split("\n"), 1):
        for found in PATH.finditer(line.split("//")[0]):
            segments = found.group(1).split("::")
            if segments[0] == "crate":
                base = []
            elif segments[0] == "self" or is_dir_module:
                base = list(module)
            else:
                base = list(module[:-1])
            i = 1
            if segments[0] == "super" and not is_dir_module:
                pass
            elif segments[0] == "super":
                base = base[:-1]
            while i < len(segments) and segments[i] == "super":
                base, i = base[:-1], i + 1
            target = resolve(base + segments[i:])
            if target != module and target != module[: len(target)]:
                edges[module].add(target)
                places.setdefault((module, target), f"{file}:{number}")

# Top level: part -> parts it uses.
parts = collections.defaultdict(set)
for source, targets in edges.items():
    for target in targets:
        if source and target and source[0] != target[0]:
            parts[source[0]].add(target[0])
for part in sorted(parts):
    print(f"{part} -> {', '.join(sorted(parts[part]))}")


def reaches(start):
    seen, stack = set(), [start]
    while stack:
        for nxt in parts.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


looping = [part for part in sorted(parts) if part in reaches(part)]

# File level: strongly connected components (Tarjan, iterative).
index, low, stack, on_stack, components = {}, {}, [], set(), []
for start in modules:
    if start in index:
        continue
    work = [(start, iter(sorted(edges.get(start, ()))))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
        node, children = work[-1]
        child = next(children, None)
        if child is not None:
            if child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(component)


def name(module):
    return "/".join(module) or "lib"


for component in components:
    if len(component) == 2:
        print("two-file cycle:", " <-> ".join(sorted(map(name, component))))
too_long = [c for c in components if len(c) > 2]
for component in too_long:
    print(f"CYCLE of {len(component)} files:", ", ".join(sorted(map(name, component))))
if looping:
    print("PARTS ON A CYCLE:", ", ".join(looping))
if verbose:
    for (source, target), place in sorted(places.items()):
        if source and target and source[0] != target[0]:
            print(f"  {name(source)} -> {name(target)}  ({place})")
edge_count = sum(len(v) for v in edges.values())
print(f"{len(modules)} modules, {edge_count} edges; parts on a cycle: {len(looping)}; "
      f"cycles of more than two files: {len(too_long)}")
sys.exit(1 if looping or too_long else 0)
