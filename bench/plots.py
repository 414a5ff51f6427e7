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


def accept(path: Path, series: dict[str, dict[str, LoadResult]], *, title: str) -> str:
    """Throughput and latency of each target (e.g. the ceilings and POST /v1/send) for each body."""
    labels = list(next(iter(series.values())))
    figure, (throughput, latency) = plt.subplots(1, 2, figsize=(11, 4))
    _bars(
        throughput,
        labels,
        {target: [results[n].throughput for n in labels] for target, results in series.items()},
        "requests per second",
    )
    percentiles = {
        f"{target} p{q}": [results[n].percentile_ms(q) for n in labels]
        for q in (50, 99)
        for target, results in series.items()
    }
    _bars(latency, labels, percentiles, "latency (ms)")
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


def fairness(path: Path, results: dict[int, dict[str, float]]) -> str:
    """Domain B's wait (p50, p99) against domain A's backlog."""
    figure, axis = plt.subplots(figsize=(7, 4))
    sizes = list(results)
    axis.plot(sizes, [results[n]["p50"] * 1000 for n in sizes], marker="o", label="B's wait p50")
    axis.plot(sizes, [results[n]["p99"] * 1000 for n in sizes], marker="o", label="B's wait p99")
    axis.set_xscale("log")
    axis.set_xticks(sizes, [f"{n:,}" for n in sizes])
    axis.set_xlabel("domain A's backlog (messages)")
    axis.set_ylabel("domain B's wait (ms)")
    axis.set_ylim(bottom=0)
    axis.legend()
    figure.suptitle("8. Fairness: another domain's wait against one domain's backlog")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path.name


def relay(path: Path, run: dict, *, throttle_seconds: float) -> str:
    """The delivered rate and the fleet's effective rate over time, the throttling window shaded."""
    figure, axis = plt.subplots(figsize=(9, 4))
    end = max(run["delivered"])
    bins = [n * 0.5 for n in range(int(end / 0.5) + 2)]
    counts = [sum(1 for at in run["delivered"] if low <= at < low + 0.5) * 2 for low in bins]
    axis.step(bins, counts, where="post", label="delivered (messages/s, 0.5 s bins)")
    axis.plot(*zip(*run["samples"], strict=True), label="effective rate (shared state)")
    axis.axvspan(0, throttle_seconds, color="tab:red", alpha=0.1, label="sink answers 421 to every 5th MAIL FROM")
    axis.set_xlabel("seconds from the first delivery")
    axis.set_ylabel("messages per second")
    axis.set_ylim(bottom=0)
    axis.legend(loc="lower right")
    figure.suptitle("9. Relay rate: AIMD under a throttling relay")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path.name
