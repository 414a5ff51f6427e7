"""The cycle check of `make lint`: no two modules of the server import each other, directly or round a loop.

    python -m tests.import_cycles

import-linter's contracts order packages and rooms; this check covers what they cannot, every module
against every other in config, mailservice, domains, apikeys, templates_app, messaging and webhooks,
wherever it stands. Imports inside functions and under TYPE_CHECKING count too: a function-level
import written to hide a cycle is still a cycle. It reads the import graph with grimp, import-linter's
own library, and names each loop it finds, module by module.
"""

import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
SERVER = ("config", "mailservice", "domains", "apikeys", "templates_app", "messaging", "webhooks")


def import_graph() -> dict[str, set[str]]:
    """Each server module and the server modules it imports."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph(*SERVER, cache_dir=None)
    return {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion),
    each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def main() -> int:
    found = cycles(import_graph())
    for component in found:
        print(f"import cycle of {len(component)} modules: {', '.join(component)}", file=sys.stderr)
    if found:
        return 1
    print("import cycles: none between server modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
