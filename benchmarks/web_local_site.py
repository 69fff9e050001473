"""Train and evaluate the WebWalkerQA task on a local copy of a website, through the `tfgrpo` CLI.

The site is the web kit's test site (tests/fixtures/web/site/, a small research institute), served on
127.0.0.1. Ten questions about it, in WebWalkerQA's hub layout: five in the ``silver`` split (training)
and five about other facts in ``main`` (evaluation), so the evaluation questions are never trained on.
The run is the command a user with a local mirror of a site would type:

    tfgrpo train --task webwalkerqa --source QA_FOLDER --allow-address 127.0.0.1 ...
    tfgrpo eval  --task webwalkerqa --source QA_FOLDER --allow-address 127.0.0.1 --library .../library.json

Usage:
    python benchmarks/web_local_site.py                      # embedded model, about 20 minutes on 2 cores
    python benchmarks/web_local_site.py --lm openai/gpt-4o-mini

Writes the run folder (resumable log, library, eval JSON) under --out and prints both CLI outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tfgrpo_dspy import cli

SITE_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "web" / "site"

# (question, answer, difficulty, page the answer is on); WebWalkerQA's row schema is filled in below.
TRAIN_QUESTIONS = [
    ("In which year was the Riverside Institute founded?", "1987", "easy", "about.html"),
    ("Who is the director of the Riverside Institute?", "Ada Lovelace", "medium", "team.html"),
    ("What email address can you write to in order to contact the Riverside Institute?",
     "office@riverside.test", "easy", "contact.html"),
    ("On what date was the Riverside Institute's 2024 open day held?", "14 September 2024", "medium",
     "news/2024.html"),
    ("What does the Riverside Institute study?", "Rivers, lakes and the people who live by them", "easy", ""),
]
EVAL_QUESTIONS = [
    ("On the banks of which river was the Riverside Institute founded?", "The Elm river", "easy", "about.html"),
    ("Who is the head of field research at the Riverside Institute?", "Mary Anning", "medium", "team.html"),
    ("What is the street address of the Riverside Institute?", "12 Mill Lane, Elmford", "easy", "contact.html"),
    ("How many visitors came to the Riverside Institute's 2024 open day?", "350", "medium", "news/2024.html"),
    ("In which town is the Riverside Institute?", "Elmford", "easy", "contact.html"),
]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_site(directory: Path, port: int) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1:``port`` in a thread; yields the root URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), partial(_QuietHandler, directory=str(directory)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def write_questions(folder: Path, root_url: str) -> None:
    """WebWalkerQA's hub layout: data/{silver,main}-00000-of-00001.jsonl with lowercase keys."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for split, questions in (("silver", TRAIN_QUESTIONS), ("main", EVAL_QUESTIONS)):
        rows = [
            {"question": question, "answer": answer, "root_url": root_url,
             "info": {"type": "single_source", "difficulty_level": difficulty, "domain": "organization",
                      "lang": "en", "source_website": [root_url + page], "golden_path": ["root->" + (page or "root")]}}
            for question, answer, difficulty, page in questions
        ]
        (data / f"{split}-00000-of-00001.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="local")
    parser.add_argument("--out", type=Path, default=Path("runs/web-local-site"))
    parser.add_argument("--group-size", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-iters", type=int, default=3, help="agent steps per question")
    parser.add_argument("--max-tokens", type=int, default=384, help="tokens per completion")
    parser.add_argument("--k", type=int, default=2, help="evaluation samples per question")
    parser.add_argument("--port", type=int, default=8765,
                        help="local port of the site; fixed, because the run log fingerprints the questions' "
                        "root URL and a rerun resumes only with the same one")
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    qa = args.out / "webwalkerqa"
    common = ["--task", "webwalkerqa", "--source", str(qa), "--lm", args.lm, "--allow-address", "127.0.0.1",
              "--max-iters", str(args.max_iters), "--max-tokens", str(args.max_tokens)]
    train = ["train", *common, "--out", str(args.out / "train"), "--group-size", str(args.group_size),
             "--epochs", str(args.epochs), "--no-summaries"]
    evaluate = ["eval", *common, "--k", str(args.k), "--library", str(args.out / "train" / "library.json"),
                "--out", str(args.out / "eval.json")]
    started = time.monotonic()
    with serve_site(SITE_DIR, args.port) as root_url:
        write_questions(qa, root_url)
        print(f"site {SITE_DIR} at {root_url}")
        for argv_ in (train, evaluate):
            print(f"\n$ tfgrpo {shlex.join(argv_)}", flush=True)
            code = cli.main(argv_)
            if code:
                return code
    print(f"\nfinished in {(time.monotonic() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
