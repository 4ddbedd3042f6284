
import json, resource, sys, time
import ctranslate2
model, compute_type, threads, pieces, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
inter = int(sys.argv[6]) if len(sys.argv) > 6 else 1
lines = [line.split() for line in open(pieces, encoding="utf-8").read().splitlines()]
translator = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, inter_threads=inter,
                                    intra_threads=max(1, threads // inter))
order = sorted(range(len(lines)), key=lambda i: -len(lines[i]))
hypotheses = [None] * len(lines)
translator.translate_batch(lines[:8], beam_size=4, length_penalty=0.6)  # warm-up
start = time.perf_counter()
batches = [order[first:first + 64] for first in range(0, len(order), 64)]
pending = [translator.translate_batch([lines[i] for i in batch], beam_size=4, length_penalty=0.6,
                                      max_batch_size=64, max_decoding_length=len(lines[batch[0]]) + 50,
                                      asynchronous=inter > 1) for batch in batches]
for batch, results in zip(batches, pending):
    for i, result in zip(batch, results):
        hypotheses[i] = (result.result() if inter > 1 else result).hypotheses[0]
seconds = time.perf_counter() - start
json.dump({"seconds": seconds, "hypotheses": [" ".join(h) for h in hypotheses],
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, open(out, "w"))
