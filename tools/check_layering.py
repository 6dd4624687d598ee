#!/usr/bin/env python3
"""Module order check (ctest label `layering`; issue 29).

Reads the module table of docs/architecture.md (its row order is the module order, lowest
first; the `may include` column names the modules whose internal headers a module may
`#include "<module>/..."`) and fails, naming file:line, on
  - an include from a lower module to a higher one (or to a module not in the table's order),
  - an include of a module the including module does not list,
  - a public header (include/kvtier/) that includes a module's internal header,
  - an include cycle among the files of src/kernels (a header and the .cc of the same stem
    are one component; a cycle between components is a loop of calls),
  - a folder of src/ with no row in the table, or a row whose `may include` names a module
    that is not below it,
  - a library target (`kvtier_module(TARGET MODULE)` in CMake) linking the target of a module
    its row does not list (CMake's link graph and the table say the same).
Front ends (rows whose kind is `front end`) may include public headers (`kvtier/...`) and the
internal headers of the modules their row lists; a benchmark file may also include the
internals of the modules it measures, listed in the table "Benchmarks" of the same page.
Test files (`*_test.cc`, `*_test_util.h`) may include test-support headers (`*_test_util.h`,
`test_*.h`) of any lower module. There are no other exceptions than ALLOWED below.

Usage: tools/check_layering.py [REPO_ROOT]   (exit 0: the order holds)
"""
import fnmatch
import os
import re
import sys

# Known violations, each with the work that removes it: (file, included header). Empty since
# issue 29 merged; an entry that no longer occurs fails the check (no stale holes).
ALLOWED: set = set()

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".h", ".cc", ".cpp", ".hpp", ".inc")


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def words(cell):
    """Module names in a cell: `a`, b, c (backticks optional; '-' or empty: none)."""
    out = []
    for w in re.split(r"[,\s]+", cell.replace("`", "")):
        if w and w not in ("-", "—"):
            out.append(w)
    return out


def read_tables(path):
    """The module table and the benchmark table of docs/architecture.md."""
    lines = open(path, encoding="utf-8").read().splitlines()
    modules, benches = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$",
                                                                     lines[i + 1]):
            header = [h.lower() for h in cells(line)]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append((i + 1, cells(lines[i])))
                i += 1
            if header[:1] == ["module"] and "may include" in header:
                col = {h: n for n, h in enumerate(header)}
                for lineno, r in rows:
                    modules.append({
                        "name": r[col["module"]].replace("`", ""),
                        "kind": r[col["kind"]].lower() if "kind" in col else "library",
                        "folder": r[col["folder"]].replace("`", "").rstrip("/"),
                        "may": words(r[col["may include"]]),
                        "line": lineno,
                    })
            elif header[:1] == ["benchmark files"]:
                for lineno, r in rows:
                    for pat in words(r[0]):
                        benches.append((pat, words(r[1]), lineno))
            continue
        i += 1
    return modules, benches


def is_test_file(rel):
    base = os.path.basename(rel)
    return re.search(r"_test\.(cc|cpp)$", base) or re.search(r"_test_util\.h$", base)


def is_test_support(inc):
    base = os.path.basename(inc)
    return base.endswith("_test_util.h") or base.startswith("test_")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    doc = "docs/architecture.md"
    modules, benches = read_tables(os.path.join(root, doc))
    errors = []
    if not modules:
        print(f"{doc}: no module table (a table with columns `module` ... `may include`)")
        return 1
    level = {m["name"]: n for n, m in enumerate(modules)}

    # The table itself: every dependency is below its user; every src/ folder has a row.
    for m in modules:
        for d in m["may"]:
            if d not in level:
                errors.append(f"{doc}:{m['line']}: {m['name']} may include `{d}`, "
                              f"which has no row in the table")
            elif level[d] >= level[m["name"]]:
                errors.append(f"{doc}:{m['line']}: {m['name']} may include `{d}`, "
                              f"which is not below it in the module order")
    for d in sorted(os.listdir(os.path.join(root, "src"))):
        if os.path.isdir(os.path.join(root, "src", d)) and d not in level:
            errors.append(f"src/{d}: a module folder with no row in the table of {doc}")

    seen_allowed = set()
    kernel_edges = []  # (from_rel, to_rel, lineno)

    def files_under(folder):
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            if "testdata" in dirpath.split(os.sep):
                continue
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, n), root)

    # Public headers: kvtier/ only.
    for rel in files_under("include"):
        for lineno, line in enumerate(open(os.path.join(root, rel), encoding="utf-8"), 1):
            mt = INCLUDE_RE.match(line)
            if mt and mt.group(1).split("/")[0] in level:
                errors.append(f"{rel}:{lineno}: public header includes the internal header "
                              f"\"{mt.group(1)}\" (public headers include kvtier/ only)")

    for m in modules:
        if not os.path.isdir(os.path.join(root, m["folder"])):
            errors.append(f"{doc}:{m['line']}: folder {m['folder']} of {m['name']} not found")
            continue
        front = m["kind"].startswith("front")
        for rel in files_under(m["folder"]):
            extra = set()
            for pat, mods, _ in benches:
                if fnmatch.fnmatch(rel, pat):
                    extra.update(mods)
            text = open(os.path.join(root, rel), encoding="utf-8").read().splitlines()
            for lineno, line in enumerate(text, 1):
                mt = INCLUDE_RE.match(line)
                if not mt:
                    continue
                inc = mt.group(1)
                target = inc.split("/")[0] if "/" in inc else None
                if m["name"] == "kernels":
                    path = os.path.join("src", inc) if target == "kernels" else (
                        os.path.join(os.path.dirname(rel), inc) if target is None else None)
                    if path and os.path.isfile(os.path.join(root, path)):
                        if (rel, inc) in ALLOWED:
                            seen_allowed.add((rel, inc))
                        else:
                            kernel_edges.append((rel, os.path.normpath(path), lineno))
                if target not in level or target == m["name"]:
                    continue  # public (kvtier/), own module, or not ours (hwy/, gtest/)
                if (rel, inc) in ALLOWED:
                    seen_allowed.add((rel, inc))
                    continue
                where = f"{rel}:{lineno}: {m['name']} includes \"{inc}\""
                if level[target] > level[m["name"]]:
                    errors.append(f"{where}: {target} is above {m['name']} in the module order")
                elif target in m["may"] or target in extra:
                    continue
                elif is_test_file(rel) and is_test_support(inc):
                    continue
                elif front:
                    errors.append(f"{where}: a front end uses public headers (kvtier/) and "
                                  f"the internals its row lists ({', '.join(m['may']) or '-'})"
                                  f" only")
                else:
                    errors.append(f"{where}: {target} is not among {m['name']}'s "
                                  f"dependencies ({', '.join(m['may']) or '-'})")

    # CMake: a library module's targets link only what its row lists.
    owner, links = {}, []
    for m in modules:
        for rel in files_under_cmake(root, m["folder"]):
            text = open(os.path.join(root, rel), encoding="utf-8").read()
            for mt in re.finditer(r"kvtier_module\(\s*(\S+)\s+(\S+)\s*\)", text):
                owner[mt.group(1)] = mt.group(2)
            for mt in re.finditer(r"target_link_libraries\(\s*(\S+)([^)]*)\)", text):
                lineno = text.count("\n", 0, mt.start()) + 1
                for dep in re.findall(r"\bkvtier_\w+", mt.group(2)):
                    links.append((f"{rel}:{lineno}", mt.group(1), dep))
    for loc, tgt, dep in links:
        a, b = owner.get(tgt), owner.get(dep)
        if not a or not b or a == b or a not in level or b not in level:
            continue
        if modules[level[a]]["kind"].startswith("front"):
            continue
        if level[b] > level[a]:
            errors.append(f"{loc}: {tgt} ({a}) links {dep} ({b}): {b} is above {a} in the "
                          f"module order")
        elif b not in modules[level[a]]["may"]:
            errors.append(f"{loc}: {tgt} ({a}) links {dep} ({b}), which the table does not "
                          f"list for {a}")

    # Cycles among src/kernels components (stem: x.h + x.cc; x-inl.h is its own).
    def comp(path):
        base = os.path.basename(path)
        return re.sub(r"\.(h|cc|cpp)$", "", base)

    graph = {}
    for src, dst, lineno in kernel_edges:
        a, b = comp(src), comp(dst)
        if a != b:
            graph.setdefault(a, []).append((b, f"{src}:{lineno}", dst))
    cycles = find_cycles(graph)
    for cyc in cycles:
        steps = "; ".join(f"{loc} includes {dst}" for _, loc, dst in cyc)
        errors.append(f"{cyc[0][1]}: include cycle inside src/kernels: {steps}")

    for rel, inc in sorted(ALLOWED - seen_allowed):
        errors.append(f"tools/check_layering.py: allow-list entry ({rel}, {inc}) no longer "
                      f"occurs: remove it")

    for e in errors:
        print(e)
    if errors:
        print(f"layering: {len(errors)} problem(s); the module order is the table in {doc}")
        return 1
    print(f"layering: {len(modules)} modules in order "
          f"({' < '.join(m['name'] for m in modules)}); "
          f"{len(ALLOWED)} allow-listed include(s) left")
    return 0


def files_under_cmake(root, folder):
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
        for n in sorted(names):
            if n == "CMakeLists.txt" or n.endswith(".cmake"):
                yield os.path.relpath(os.path.join(dirpath, n), root)


def find_cycles(graph):
    """One cycle per strongly connected component with more than one node: a list of edges."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _, _ in graph.get(v, []):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(set(scc))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for scc in sccs:
        start = sorted(scc)[0]
        # Breadth-first from start back to start inside the component.
        prev, frontier, found = {start: None}, [start], None
        while frontier and not found:
            nxt = []
            for v in frontier:
                for w, loc, dst in graph.get(v, []):
                    if w not in scc:
                        continue
                    if w == start:
                        found = (v, loc, dst)
                        break
                    if w not in prev:
                        prev[w] = (v, loc, dst)
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        edges = [found]
        v = found[0]
        while prev[v] is not None:
            edges.append(prev[v])
            v = prev[v][0]
        cycles.append(list(reversed(edges)))
    return cycles


if __name__ == "__main__":
    sys.exit(main())
