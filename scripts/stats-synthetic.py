#!/usr/bin/env python3
"""A synthetic attempt set for the statistics tests: 9 tasks x 3 repetitions, mixed outcomes, a
failed attempt (no metrics), an unscored attempt, a task with one arm missing, and wall times
with a real arm effect. Deterministic (numpy seed 7):

    python3 scripts/stats-synthetic.py > tests/fixtures/stats/synthetic-attempts.json
"""
import json
import numpy as np

rng = np.random.default_rng(7)
SCORES = {"correct": 1, "partial": 0.5, "incorrect": 0, "incomplete": 0}
attempts = []
for t in range(9):
    for arm in ("repository", "mcp"):
        for rep in (1, 2, 3):
            p_correct = 0.35 + 0.07 * t + (0.2 if arm == "mcp" else 0)
            outcome = rng.choice(["correct", "partial", "incorrect"], p=np.array([min(p_correct, 0.85), 0.1, max(0.0, 1 - min(p_correct, 0.85) - 0.1)]) / sum([min(p_correct, 0.85), 0.1, max(0.0, 1 - min(p_correct, 0.85) - 0.1)]))
            status = "completed"
            score = SCORES[str(outcome)]
            if t == 2 and arm == "repository" and rep == 2:
                status, outcome, score = "failed", "incomplete", 0
            if t == 5 and arm == "mcp" and rep == 3:
                outcome, score = "missing", None
            if t == 8 and arm == "mcp":
                continue
            completed = status == "completed"
            inp = int(rng.integers(800, 1600)) + (300 if arm == "mcp" else 0)
            attempts.append({
                "task": f"task-{t}", "arm": arm, "repetition": rep, "status": status, "outcome": str(outcome), "score": score,
                "inputTokens": inp if completed else None, "outputTokens": int(rng.integers(100, 400)) if completed else None,
                "cacheCreationInputTokens": int(rng.integers(0, 2000)) if completed else None, "cacheReadInputTokens": int(rng.integers(0, 9000)) if completed else None,
                "toolCalls": int(rng.integers(1, 9)) if completed else None,
                "wallTimeMs": int(rng.normal(30000 if arm == "repository" else 24000, 4000)) if completed else None,
                "chargedUsd": round(float(rng.uniform(0.01, 0.06)), 6),
            })
print(json.dumps({"source": "python3 scripts/stats-synthetic.py (numpy seed 7)", "attempts": attempts}, indent=1))
