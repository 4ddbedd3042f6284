import sys, cProfile, pstats, io
sys.argv = [sys.argv[0], "16", "32", "64"]
exec(open("overhead.py").read().split("for r in range(4):")[0])
beam_search(model, src, beam=4, max_len_a=0.0, max_len_b=40)
pr = cProfile.Profile(); pr.enable()
for _ in range(3):
    beam_search(model, src, beam=4, max_len_a=0.0, max_len_b=40)
pr.disable()
s = io.StringIO(); ps = pstats.Stats(pr, stream=s).sort_stats("tottime"); ps.print_stats(35); print(s.getvalue()[:9000])
