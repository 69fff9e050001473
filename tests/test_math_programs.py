"""Math programs and tasks: the ReAct agent really runs Python, tool calls are counted, tasks are wired."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scripted import Call, scripted_lm

from tfgrpo_dspy.inference.evaluation import evaluate_at_k
from tfgrpo_dspy.kits.math import MATH_TASKS, MathAnswerMetric, PythonSandbox, make_cot_solver, make_math_agent
from tfgrpo_dspy.kits.math.data import DAPO_PREFIX, DAPO_SUFFIX, load_dapo_math
from tfgrpo_dspy.tasks import TaskData


def agent_script(call: Call) -> dict:
    """Call run_python once with code that computes the answer, then finish; answer what was printed."""
    # The trajectory's own [[ ## observation_i ## ]] markers make the script see them as input fields.
    observations = [value for key, value in call.inputs.items() if key.startswith("observation_")]
    if call.kind == "react":
        if not observations:
            return {"next_thought": "Compute it.", "next_tool_name": "run_python",
                    "next_tool_args": {"code": "print(sum(range(1, 10)) - 3)"}}
        return {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": {}}
    if call.kind == "extract_answer":
        answer = "42" if "stdout:\n42" in observations[0] else "0"
        return {"reasoning": "The script printed the result.", "answer": answer}
    raise AssertionError(f"unexpected call kind {call.kind}")


def test_agent_runs_python_and_evaluation_counts_tool_calls() -> None:
    example = dspy.Example(problem="What is 1+...+9 minus 3?", answer="42").with_inputs("problem")
    report = evaluate_at_k(
        make_math_agent(PythonSandbox(timeout_seconds=10)), [example], MathAnswerMetric(), k=2, temperature=0.7,
        num_threads=2, lm=scripted_lm(agent_script), progress=False,
    )
    assert [s.score for s in report.examples[0].samples] == [1.0, 1.0]  # 42 only appears if the code ran
    assert [s.tool_calls for s in report.examples[0].samples] == [1, 1]
    assert report.mean_tool_calls == 1.0


def test_cot_solver_and_agent_share_the_signature() -> None:
    solver, agent = make_cot_solver(), make_math_agent()
    assert list(solver.predict.signature.input_fields) == ["problem"]
    assert "answer" in solver.predict.signature.output_fields
    assert list(agent.signature.input_fields) == ["problem"] and list(agent.signature.output_fields) == ["answer"]
    assert "run_python" in agent.tools
    with pytest.raises(ValueError, match="max_iters"):
        make_math_agent(max_iters=0)


def test_math_tasks_registry() -> None:
    assert set(MATH_TASKS) == {"dapo-math", "aime24", "aime25", "gsm8k"}
    dapo = MATH_TASKS["dapo-math"]
    assert dapo.train_defaults["group_size"] == 5 and dapo.train_defaults["epochs"] == 3
    assert dapo.train_defaults["temperature"] == 0.7 and dapo.default_train_n == 100
    for name in ("aime24", "aime25"):
        assert MATH_TASKS[name].eval_defaults == {"k": 32, "temperature": 0.3}
        with pytest.raises(ValueError, match="evaluation benchmark"):
            MATH_TASKS[name].load_trainset(TaskData())
    assert MATH_TASKS["gsm8k"].eval_defaults["temperature"] == 0.3
    programs = {type(task.make_program()) for task in MATH_TASKS.values()}
    assert programs == {dspy.ReAct}  # one program everywhere, so a library transfers
    assert isinstance(dapo.make_metric(None), MathAnswerMetric)


def test_dapo_task_train_and_heldout_sets_are_disjoint(tmp_path: Path) -> None:
    schema = pa.schema([
        ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
    ])
    rows = [
        {"prompt": [{"content": f"{DAPO_PREFIX}Problem {i}{DAPO_SUFFIX}", "role": "user"}],
         "reward_model": {"ground_truth": str(i), "style": "rule"}}
        for i in range(130)
    ]
    path = tmp_path / "data" / "dapo-math-17k.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    dapo = MATH_TASKS["dapo-math"]
    train = dapo.load_trainset(TaskData(source=str(tmp_path)))
    heldout = dapo.load_evalset(TaskData(source=str(tmp_path)))
    assert len(train) == 100 and len(heldout) == 30
    assert not {e.problem for e in train} & {e.problem for e in heldout}


def test_dapo_task_defaults_to_the_papers_seed_42(tmp_path: Path) -> None:
    schema = pa.schema([
        ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
    ])
    rows = [{"prompt": [{"content": f"{DAPO_PREFIX}Problem {i}{DAPO_SUFFIX}", "role": "user"}],
             "reward_model": {"ground_truth": str(i), "style": "rule"}} for i in range(30)]
    path = tmp_path / "dapo.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    dapo = MATH_TASKS["dapo-math"]
    default = [e.problem for e in dapo.load_trainset(TaskData(source=str(path), n=10))]
    assert default == [e.problem for e in load_dapo_math(str(path), n=10, seed=42)]
    assert default != [e.problem for e in dapo.load_trainset(TaskData(source=str(path), n=10, seed=0))]


def test_gsm8k_task_on_one_file_trains_and_evaluates_on_disjoint_rows(tmp_path: Path, caplog) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"question": f"Q{i}?", "answer": f"work\n#### {i}"}) + "\n" for i in range(130)))
    gsm8k = MATH_TASKS["gsm8k"]
    for seed in (None, 7):
        train = gsm8k.load_trainset(TaskData(source=str(path), n=20, seed=seed))
        evalset = gsm8k.load_evalset(TaskData(source=str(path), seed=seed))
        assert len(train) == 20 and len(evalset) == 30  # rows after the first 100 of the shuffled order
        assert not {e.problem for e in train} & {e.problem for e in evalset}
    assert not caplog.records
    gsm8k.load_trainset(TaskData(source=str(path), n=120))
    assert "overlaps the evaluation set" in caplog.text
