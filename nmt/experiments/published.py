"""The published numbers the reproduction is compared with (the report and ``make train``'s closing line)."""

from __future__ import annotations

from typing import Any

# Tokenized test BLEU published for each (pair, system); Nguyen & Salazar 2019 Table 3 and Henry et al. 2020.
PUBLISHED: dict[tuple[str, str], float] = {
    ("gl-en", "prenorm_fixnorm_scalenorm"): 20.91,
    ("sk-en", "prenorm_fixnorm_scalenorm"): 30.25,
    ("en-vi", "prenorm_fixnorm_scalenorm"): 32.79,
    ("en-he", "prenorm_fixnorm_scalenorm"): 28.44,
    ("ar-en", "prenorm_fixnorm_scalenorm"): 34.15,
    ("en-vi", "qknorm"): 33.24,
}
QKNORM_AVERAGE_GAIN = 0.928  # QKNorm over the TwT baseline, averaged over the five pairs (Henry et al. 2020)
BASELINE = "prenorm_fixnorm_scalenorm"


def reference_score(pair: str, system: str) -> dict[str, Any]:
    """The published test BLEU of ``pair``/``system``, or for QKNorm the baseline's plus the average gain."""
    if (pair, system) in PUBLISHED:
        return {"value": PUBLISHED[(pair, system)], "kind": "published"}
    if system == "qknorm" and (pair, BASELINE) in PUBLISHED:
        return {"value": round(PUBLISHED[(pair, BASELINE)] + QKNORM_AVERAGE_GAIN, 2), "kind": "expected"}
    return {"value": None, "kind": None}
