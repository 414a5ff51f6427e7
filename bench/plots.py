"""PNG plots for the results file (matplotlib, headless)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from bench.load import LoadResult  # noqa: E402


def _bars(axis, labels: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        positions = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        axis.bar(positions, values, width, label=name)
    axis.set_xticks(range(len(labels)), labels)
    axis.set_ylabel(ylabel)
    axis.legend()


def accept(path: Path, ceiling: dict[str, LoadResult], send: dict[str, LoadResult], *, title: str) -> str:
    labels = list(send)
    figure, (throughput, latency) = plt.subplots(1, 2, figsize=(11, 4))
    _bars(
        throughput,
        labels,
        {"ceiling": [ceiling[n].throughput for n in labels], "POST /v1/send": [send[n].throughput for n in labels]},
        "requests per second",
    )
    _bars(
        latency,
        labels,
        {
            "ceiling p50": [ceiling[n].percentile_ms(50) for n in labels],
            "send p50": [send[n].percentile_ms(50) for n in labels],
            "ceiling p99": [ceiling[n].percentile_ms(99) for n in labels],
            "send p99": [send[n].percentile_ms(99) for n in labels],
        },
        "latency (ms)",
    )
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path.name


def listing(path: Path, small: dict[str, LoadResult], large: dict[str, LoadResult], *, sizes: tuple[str, str]) -> str:
    labels = list(small)
    figure, axis = plt.subplots(figsize=(8, 4))
    _bars(
        axis,
        labels,
        {
            f"p50, {sizes[0]}": [small[n].percentile_ms(50) for n in labels],
            f"p50, {sizes[1]}": [large[n].percentile_ms(50) for n in labels],
            f"p99, {sizes[0]}": [small[n].percentile_ms(99) for n in labels],
            f"p99, {sizes[1]}": [large[n].percentile_ms(99) for n in labels],
        },
        "latency (ms)",
    )
    figure.suptitle("3. List scaling: latency by messages in the key's domain")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path.name


def rates(path: Path, values: dict[str, float], *, title: str) -> str:
    """One horizontal bar per sender, in messages per second."""
    figure, axis = plt.subplots(figsize=(9, 0.6 * len(values) + 1.5))
    names = list(values)[::-1]
    axis.barh(names, [values[name] for name in names])
    axis.set_xlabel("messages per second")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path.name
