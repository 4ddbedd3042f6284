"""How a length-aware scheduler for the service's lanes could pay, simulated (exploratory; the measured answer is
``docs/usage.md``'s bench rows).

A cost model of one thread's batch, fitted to ``batch_surface.out`` (the measured rates of sorted and random batches
of 8-64 sentences): each beam-search step costs ``A`` plus, per live sentence, ``B + C * S`` (``S``: the batch's
longest source, in pieces), and a sentence is live for ``1.28 * (its output + 1)`` steps (the ratio of steps to
output pieces measured on 256 test sentences). ``sentence_lengths.json``: each test sentence's source and output
length in pieces (the model of the bench, fp32). The simulation: 64 (or 32) closed-loop one-sentence clients sending
the test set in order to two lanes; a free lane takes all waiting sentences (split by length with the other free
lane: the service before) or, beside a busy lane and with 16 or more waiting, a share of them chosen by a criterion.

    python scheduler_sim.py
"""
import heapq
import json
import math
import random
from pathlib import Path

HERE = Path(__file__).parent
lengths = json.loads((HERE / "sentence_lengths.json").read_text())
SRC, LIVE = lengths["src"], [math.ceil(1.28 * (h + 1)) for h in lengths["hyp"]]
N = len(SRC)


def cost(batch: list[int], a: float, b: float, c: float) -> float:
    ends, longest = sorted(LIVE[i] for i in batch), max(SRC[i] for i in batch)
    seconds, step, live = 0.0, 0, len(batch)
    for end in ends:
        seconds += (end - step) * (a + (b + c * longest) * live)
        step, live = end, live - 1
    return seconds


measured = {}
for line in (HERE / "batch_surface.out").read_text().splitlines():
    words = line.split()
    if words[0] in ("sorted", "random"):
        measured[(words[0], int(words[1]))] = float(words[2])
order = sorted(range(N), key=lambda i: SRC[i])
shuffled = list(range(N))
random.Random(0).shuffle(shuffled)
layouts = {k: [(order if k[0] == "sorted" else shuffled)[i:i + k[1]] for i in range(0, N, k[1])] for k in measured}


def rates(a: float, b: float, c: float) -> dict[tuple[str, int], float]:
    return {k: N / sum(cost(batch, a, b, c) for batch in layouts[k]) for k in measured}


grid = [(a * 0.25e-3, b * 0.05e-3, c * 0.002e-3) for a in range(4, 25) for b in range(16) for c in range(30)]
A, B, C = min(grid, key=lambda p: sum(math.log(r / measured[k]) ** 2 for k, r in rates(*p).items()))
fitted = rates(A, B, C)
print(f"fit: A {A * 1e3:.2f} ms/step, B {B * 1e3:.3f} ms + C {C * 1e3:.4f} ms x longest source per live sentence")
print("  " + ", ".join(f"{k[0]} {k[1]}: {measured[k]:.1f} measured {fitted[k]:.1f} fitted" for k in measured))


def simulate(choose, clients: int, lanes: int = 2) -> tuple[float, float, float]:
    """Sentences/s, p50 and p99 latency (s) of ``clients`` closed-loop clients."""
    sent, now, waiting, running, free, done, latencies = 0, 0.0, [], [], lanes, 0, []
    for _ in range(clients):
        waiting.append((0.0, sent))
        sent += 1
    while done < N:
        while free and waiting:
            batch = choose(waiting, now, free, lanes)
            for item in batch:
                waiting.remove(item)
            free -= 1
            end = now + cost([i for _, i in batch], A, B, C) + 0.003
            latencies += [end - arrived for arrived, _ in batch]
            heapq.heappush(running, (end, len(batch)))
        now, finished = heapq.heappop(running)
        free, done = free + 1, done + finished
        for _ in range(finished):
            if sent < N:
                waiting.append((now, sent))
                sent += 1
    latencies.sort()
    return N / now, latencies[len(latencies) // 2], latencies[int(0.99 * len(latencies))]


def take_all(waiting, now, free, lanes):
    ordered = sorted(waiting, key=lambda x: SRC[x[1]])
    return ordered[:-(-len(ordered) // free)][:64]


def share(criterion: str, fraction: float, hold: float = 2.0):
    def choose(waiting, now, free, lanes):
        ordered = sorted(waiting, key=lambda x: SRC[x[1]])
        if free == lanes or len(ordered) < 16:
            return take_all(waiting, now, free, lanes)
        size, n = min(64, math.ceil(len(ordered) * fraction)), [SRC[x[1]] for x in ordered]
        spread = {"longest/shortest": lambda s: math.log(n[s + size - 1] + 1) - math.log(n[s] + 1),
                  "longest-shortest": lambda s: n[s + size - 1] - n[s],
                  "shortest first": lambda s: s,
                  "padding": lambda s: sum(n[s + size - 1] - x for x in n[s:s + size])}[criterion]
        oldest = min(range(len(ordered)), key=lambda j: ordered[j][0])
        starts = range(len(ordered) - size + 1)
        if now - ordered[oldest][0] > hold:
            starts = range(max(0, oldest - size + 1), min(oldest, len(ordered) - size) + 1)
        start = min(starts, key=spread)
        return ordered[start:start + size]
    return choose


for clients in (32, 64):
    rate, p50, p99 = simulate(take_all, clients)
    print(f"{clients} clients, take all: {rate:.1f} sentences/s, p50 {p50:.2f} s, p99 {p99:.2f} s")
    for criterion in ("longest/shortest", "longest-shortest", "shortest first", "padding"):
        for fraction in (0.5, 0.34):
            rate, p50, p99 = simulate(share(criterion, fraction), clients)
            print(f"  share {fraction} by {criterion}: {rate:.1f} sentences/s, p50 {p50:.2f} s, p99 {p99:.2f} s")
