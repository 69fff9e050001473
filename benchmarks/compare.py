"""Compare prompt optimizers on one program, one LM, one data split: paired held-out gains against tokens spent.

Every method gets the same program, the same LM, the same train / selection / held-out split, the same
seed and the same held-out decoding:

    none                the unoptimized program
    labeled             dspy.LabeledFewShot (k=16, DSPy's default: labeled training examples as demos)
    knn                 dspy.KNNFewShot (the k=16 nearest training examples by TF-IDF as labeled demos)
    bootstrap           dspy.BootstrapFewShot
    mipro               dspy.MIPROv2(auto="light")
    simba               dspy.SIMBA
    gepa                dspy.GEPA (feedback metric, reflection LM)
    tfgrpo_paper        TrainingFreeGRPO with the paper's recipe: no selection set, no gate, one batch,
                        every lesson in the prompt (top_k=None); the same labels as tfgrpo
    tfgrpo              TrainingFreeGRPO with its defaults: gated on the selection rows
    tfgrpo_on_bootstrap TrainingFreeGRPO on the BootstrapFewShot program of the same run (demos kept)
    tfgrpo_by_answer    TrainingFreeGRPO gated, each lesson routed to the training inputs with its target answer
                        (route_by="answer", no shift check)
    tfgrpo_by_answer_stated  the same, each induced rule's action the answer its failures share, written in code
    tfgrpo_phrases      tfgrpo with a contrast phrase proposed per set of failures sharing an answer (no LM call)
    tfgrpo_route_to     tfgrpo with a code-written action worded "route it to X" (reference_action)
    tfgrpo_phrases_only tfgrpo with contrast phrases as its only candidates (num_candidates=0: no induction calls)
    nearest_label       no model: the answer of the nearest training input (BM25), what routing can reach

and the paper's ablations (arXiv 2510.08191, section 4), each the paper's recipe with one change:

    direct_tips the model writes N tips from the training questions (N = tfgrpo_paper's library size),
                no rollouts, no loop; injected with ``with_experiences``
    group1      group_size=1, informative_only=False
    no_gt       ground_truth=False: majority-vote reward, no labels

For each: held-out Mean@k and the per-problem results (score and answer of every held-out problem);
the gain over ``none`` on the same problems and compile seeds with a paired bootstrap 95% interval and the
exact sign test (exact McNemar for 0/1 scores), called a change only when both agree; LM calls and
tokens by role (task model vs optimizer/reflection model, and TrainingFreeGRPO's own policy / reflection /
selection accounting); compile and evaluation wall time;
and the prompt tokens the optimized program adds to every inference call. For the gated ``tfgrpo``, the
libraries its selection gate decided on can also be scored on the held-out rows against the library it
compared each with (``gate_checks``, 3 in the gsm8k and tickets presets; ``--gate-checks N``), to see
whether the paired test there confirms each decision. Usage is metered in the engine:
each role's LM wraps the engine in a `MeteredEngine`, and every copy an optimizer makes of that LM
(rollout ids, temperatures, worker threads) shares it, so each request that reaches the model is counted
once, in its role; cache hits never reach the engine and are not billed.

Finished work is kept in a run directory (``--runs``, default ``<out-dir>/<stem>.runs``): a rerun of the
same command skips every finished compile and evaluation and resumes an interrupted TrainingFreeGRPO
compile from its own log.

    python benchmarks/compare.py --preset smoke                     # minutes: proves the harness works
    python benchmarks/compare.py --preset gsm8k --source /work/shared/data/gsm8k/train.jsonl
    python benchmarks/compare.py --preset tickets                   # 300 fresh held-out tickets (seed 1000)
    python benchmarks/compare.py --preset embedded                  # generated word problems, 2 cores
    python benchmarks/compare.py --preset embedded --methods none tfgrpo --ablations
    python benchmarks/compare.py --preset tickets_dev                # development seed 11: where defaults are chosen

Writes benchmarks/results/compare_<preset>.json, .md and .png. The code is the package
benchmarks/comparison/ (presets and data, methods, the run and its store, statistics, outputs, the CLI);
this file is its entry point.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is on sys.path already; loaded by path (the tests), it may not be.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(doc=__doc__))
