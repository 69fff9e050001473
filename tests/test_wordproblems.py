"""Offline tests of the generated word problems, their metric and the task."""

from __future__ import annotations

import re
from fractions import Fraction

import dspy
import pytest

from tfgrpo_dspy.kits.wordproblems.generator import (
    FAMILIES,
    generate_problems,
    split_of,
    train_heldout_split,
)
from tfgrpo_dspy.kits.wordproblems.metric import numeric_match, parse_number
from tfgrpo_dspy.kits.wordproblems.task import DEMO_FAMILIES, WORDPROBLEM_TASKS, make_program
from tfgrpo_dspy.tasks import TaskData


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


# Independent recomputation: read the numbers back out of the question text and solve the
# problem as a person would, with exact fractions (not the generator's integer code path).
def _solve_distractor(q: str) -> Fraction:
    boxes, per_box = map(int, re.search(r"buys (\d+) boxes of \w+ with (\d+) \w+ in each box", q).groups())
    given = int(re.search(r"gives (\d+) ", q).group(1))
    return Fraction(boxes * per_box - given)


def _solve_minutes_hours(q: str) -> Fraction:
    minutes = int(re.search(r"for (\d+) minutes every day", q).group(1))
    weeks = int(re.search(r"in (\d+) weeks", q).group(1))
    return Fraction(minutes, 60) * 7 * weeks


def _solve_cm_m(q: str) -> Fraction:
    meters = int(re.search(r"(\d+) meters long", q).group(1))
    cut = int(re.search(r"cuts off (\d+) centimeters", q).group(1))
    piece = int(re.search(r"pieces that are (\d+) centimeters", q).group(1))
    return Fraction(meters * 100 - cut, piece)


def _solve_dozens(q: str) -> Fraction:
    dozens, extra, sold = _ints(q)
    return Fraction(dozens * 12 + extra - sold)


def _solve_more_fewer(q: str) -> Fraction:
    base, times, fewer = _ints(q)
    return Fraction(base * times - fewer - base)


def _solve_percent_off_on(q: str) -> Fraction:
    price, off, on = _ints(q)
    return Fraction(price) * (1 - Fraction(off, 100)) * (1 + Fraction(on, 100))


def _solve_per_item_total(q: str) -> Fraction:
    ticket, friends, fee = _ints(q)
    return Fraction(ticket * (1 + friends) + fee)


def _solve_each_of(q: str) -> Fraction:
    classes, students, per_student, pack = _ints(q)
    return Fraction(classes * students * per_student, pack)


def _solve_rates(q: str) -> Fraction:
    volume, fill, leak = _ints(q)
    return Fraction(volume, fill - leak)


SOLVERS = {
    "distractor": _solve_distractor,
    "minutes_hours": _solve_minutes_hours,
    "cm_m": _solve_cm_m,
    "dozens": _solve_dozens,
    "more_fewer": _solve_more_fewer,
    "percent_off_on": _solve_percent_off_on,
    "per_item_total": _solve_per_item_total,
    "each_of": _solve_each_of,
    "rates": _solve_rates,
}


def test_every_family_has_an_independent_solver():
    assert set(SOLVERS) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_answers_match_independent_recomputation(family):
    problems = generate_problems(60, seed=7, families=[family])
    for ex in problems:
        expected = SOLVERS[family](ex.question)
        assert expected.denominator == 1, ex.question  # integer answer, no rounding ambiguity
        assert expected > 0, ex.question
        assert ex.answer == str(expected.numerator), ex.question
        assert ex.family == family


def test_same_seed_same_problems_other_seed_other_problems():
    first = generate_problems(20, seed=3)
    again = generate_problems(20, seed=3)
    other = generate_problems(20, seed=4)
    assert [e.toDict() for e in first] == [e.toDict() for e in again]
    assert [e.question for e in first] != [e.question for e in other]


def test_examples_have_inputs_and_canonical_answers():
    for ex in generate_problems(18, seed=0):
        assert set(ex.inputs().keys()) == {"question"}
        assert re.fullmatch(r"-?[1-9]\d*|0", ex.answer)


def test_families_are_taken_in_turn_and_questions_are_distinct():
    problems = generate_problems(45, seed=1)
    counts = {f: sum(e.family == f for e in problems) for f in FAMILIES}
    assert set(counts.values()) == {5}
    assert len({e.question for e in problems}) == 45


def test_family_subset_is_respected():
    problems = generate_problems(10, seed=0, families=["dozens", "rates"])
    assert {e.family for e in problems} == {"dozens", "rates"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_train_and_heldout_are_disjoint(seed):
    train, heldout = train_heldout_split(90, 45, seed=seed)
    assert len(train) == 90 and len(heldout) == 45
    assert not {e.question for e in train} & {e.question for e in heldout}
    assert all(split_of(e.question) == "train" for e in train)
    assert all(split_of(e.question) == "heldout" for e in heldout)
    # Same families on both sides: lessons learned in training can transfer.
    assert {e.family for e in train} == {e.family for e in heldout} == set(FAMILIES)


def test_splits_stay_disjoint_across_different_seeds():
    train = generate_problems(200, seed=11, split="train")
    heldout = generate_problems(200, seed=99, split="heldout")
    assert not {e.question for e in train} & {e.question for e in heldout}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"n": -1}, ValueError),
        ({"n": 2.5}, ValueError),
        ({"n": 3, "seed": "0"}, TypeError),
        ({"n": 3, "families": ["nope"]}, ValueError),
        ({"n": 3, "families": []}, ValueError),
        ({"n": 3, "families": "dozens"}, TypeError),
        ({"n": 3, "split": "test"}, ValueError),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error):
    with pytest.raises(error):
        generate_problems(**kwargs)


def test_asking_for_more_problems_than_a_family_has_fails_clearly():
    with pytest.raises(ValueError, match="distinct problems"):
        generate_problems(5000, seed=0, families=["minutes_hours"])


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("18", "18"),
        ("The number of bagels left is 18.", "18"),
        ("$1,234.50 in total", "1234.50"),
        ("$105", "105"),
        ("80 - 62 = 18", "18"),
        ("\\boxed{42}", "42"),
        ("x = -7", "-7"),
        ("It is 5-3", "3"),
        ("7 hours", "7"),
        ("1,000,000 beads", "1000000"),
        ("18.0", "18"),
    ],
)
def test_parse_number_takes_the_last_number(text, number):
    assert parse_number(text) == parse_number(number)


@pytest.mark.parametrize("text", ["", "eighteen", None])
def test_parse_number_without_a_number(text):
    assert parse_number(text) is None


def test_metric_scores_and_explains():
    gold = dspy.Example(question="q", answer="105").with_inputs("question")
    right = numeric_match(gold, dspy.Prediction(answer="The final price is $105.00."))
    wrong = numeric_match(gold, dspy.Prediction(answer="1,120 dollars"))
    missing = numeric_match(gold, dspy.Prediction(answer="I don't know"))
    assert (right.score, right.feedback) == (1.0, "expected 105, got 105")
    assert (wrong.score, wrong.feedback) == (0.0, "expected 105, got 1120")
    assert missing.score == 0.0 and "no number" in missing.feedback


def test_task_loads_disjoint_splits_and_runs_the_program_with_a_scripted_lm():
    task = WORDPROBLEM_TASKS["wordproblems"]
    train = task.load_trainset(TaskData(n=12, seed=0))
    heldout = task.load_evalset(TaskData(n=12, seed=0))
    assert not {e.question for e in train} & {e.question for e in heldout}
    with pytest.raises(ValueError, match="source"):
        task.load_trainset(TaskData(source="some/hub-id", n=3))
    default_train = task.load_trainset(TaskData())
    assert len(default_train) == task.default_train_n
    assert len(task.load_evalset(TaskData())) == task.default_eval_n
    # The default trainset meets every family the held-out set draws from.
    assert {e.family for e in default_train} == {e.family for e in heldout} == set(DEMO_FAMILIES)

    ex = heldout[0]
    lm = dspy.utils.DummyLM([{"reasoning": "work it out", "answer": f"It is {ex.answer}."}])
    with dspy.context(lm=lm):
        pred = make_program()(question=ex.question)
    metric = task.make_metric(None)
    assert metric(ex, pred).score == 1.0
