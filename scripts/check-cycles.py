#!/usr/bin/env python3
"""Fails when the modules of a Rust crate import each other in a circle.

Usage: scripts/check-cycles.py DIR [DIR ...]   (each a crate's src/)

Builds the file-level graph of `crate::` paths (comments and test-only code left out:
`#[cfg(test)] mod tests` blocks, and files named tests.rs, fake.rs or properties.rs) and prints
every strongly connected component of more than one module. Exits 1 if there is one: a module
graph without cycles is what lets a newcomer read the crate from the entry points down.
"""
import os
import re
import sys

TEST_ONLY_FILES = ("tests.rs", "fake.rs", "properties.rs")


def modules(root):
    """Module path (`round::tally`) -> file, for every .rs file under root."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            found["::".join(parts)] = path
    return found


def graph(mods):
    """Module -> the modules its non-test code names through `crate::`."""
    def resolve(path):
        parts = path.split("::")
        while parts:
            key = "::".join(parts)
            if key in mods:
                return key
            parts = parts[:-1]
        return None

    edges = {}
    for module, path in mods.items():
        if os.path.basename(path) in TEST_ONLY_FILES:
            continue
        text = open(path, encoding="utf-8").read()
        test_block = text.find("#[cfg(test)]\nmod tests")
        if test_block >= 0:
            text = text[:test_block]
        deps = set()
        for line in text.split("\n"):
            line = re.sub(r"//.*", "", line.strip())
            for match in re.finditer(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", line):
                target = resolve(match.group(1))
                if target and target != module and not module.startswith(target + "::"):
                    deps.add(target)
            grouped = re.match(r"use crate::\{(.*)\}", line)
            if grouped:
                for item in grouped.group(1).split(","):
                    target = resolve(item.strip().split("::")[0])
                    if target and target != module:
                        deps.add(target)
        edges[module] = deps
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
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

    for v in edges:
        if v not in index:
            visit(v)
    return found


def main():
    failed = False
    for root in sys.argv[1:]:
        edges = graph(modules(root))
        for component in cycles(edges):
            failed = True
            print(f"{root}: import cycle among {', '.join(component)}")
            for module in component:
                inside = sorted(d for d in edges[module] if d in component)
                print(f"    {module} -> {', '.join(inside)}")
        if not failed:
            print(f"{root}: no import cycle ({len(edges)} modules)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
