"""The loop survives what weak models do (issue #10, and #15 items 3 and 4): invented output,
blocks built on it, helpers called like Python's own functions, repeated errors, prose that does
not answer, FINAL written as text, and the iteration limit. Scripted replies reproduce each
pattern seen with a real small model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_cli.loop import prompts
from rlm_cli.loop.partial import model_output
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, repl
from tests.support.inproc import corpus, run

CODE = {"urllib/parse.py": "import re\n\n\ndef urlparse(url, scheme='', allow_fragments=True):\n    return url\n",
        "distutils/command/upload.py": "from urllib.parse import urlparse\n\n\ndef upload():\n    urlparse('x')\n"}


def code_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    for rel, text in CODE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def assistant_turns(req: dict) -> list[str]:
    """The model's turns of a request, after the question (the worked example's come before it)
    and the leads turn rlm writes (turn 0)."""
    msgs = req["messages"]
    start = next(i for i, m in enumerate(msgs) if "Question: " in str(m["content"]))
    lead = prompts.leads_reply("")[:20]
    return [str(m["content"]) for m in msgs[start:] if m["role"] == "assistant" and not str(m["content"]).startswith(lead)]


def test_invented_output_and_its_final_never_end_the_run_nor_reach_the_history(tmp_path: Path, llm: FakeLLM) -> None:
    invented = ("```repl\nhits = grep(r'urlparse')\nprint(hits[:3])\n```\n"
                "Output: [{'file': 'distutils/command/upload.py', 'line': 1, 'text': 'from urllib.parse import urlparse'}]\n"
                "FINAL(distutils/command/upload.py)")
    llm.script("root", invented, repl("hits = grep(r'def urlparse')\nprint(hits)"),
               repl("FINAL(hits[0]['file'])"))
    r = run(llm, [code_corpus(tmp_path)], "Which file defines urlparse?")
    assert r.error is None and r.answer == "urllib/parse.py"
    second = llm.chat_requests("root")[1]
    told = last_user(second)
    assert prompts.CLAIMED_OUTPUT in told
    assert "'file': 'distutils/command/upload.py'" in told  # the real grep output is what it sees...
    (mine,) = assistant_turns(second)
    assert "Output:" not in mine and "FINAL(" not in mine  # ...and its invented text is gone
    assert any("claimed its output" in n for n in r.notices())


def test_blocks_written_after_claimed_output_do_not_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", "```repl\nprint(len(files))\n```\nOutput: 7\n```repl\nseven = 7\nprint('ran')\n```",
               repl("print('seven' in globals())"), repl("FINAL('done')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "done"
    assert [e["block"] for e in r.of("code")][:1] == [1] and len(r.of("code")) == 3  # block 2 never ran
    assert "False" in last_user(llm.chat_requests("root")[2])


def test_python_blocks_written_beside_a_repl_block_do_not_run(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: a repl block, then "corrected code" in ```python blocks that did not
    # parse; they ran, failed, and the same reply came back until the iteration limit.
    llm.script("root", "```repl\nprint(len(files))\n```\nThe corrected code would be:\n"
                       "```python\nprint(files[0]['path'\n```",
               repl("FINAL('done')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "done" and r.error is None
    assert len(r.of("code")) == 2  # the repl block of each reply, never the illustration
    told = last_user(llm.chat_requests("root")[1])
    assert "2" in told and "SyntaxError" not in told


def test_helpers_take_the_calls_python_programmers_write(tmp_path: Path, llm: FakeLLM) -> None:
    code = (
        "a = grep(r'def urlparse', context)\n"            # like re.findall(pattern, string)
        "b = grep(context, r'def urlparse')\n"            # the wrong way round
        "c = grep('urlparse', '*.py', True)\n"            # glob and ignore_case positionally
        "f0 = [f for f in files if f['path'] == 'urllib/parse.py'][0]\n"
        "d = grep('def', context[f0['start']:f0['end']])\n"  # a file's text keeps its real file and lines
        "e = read_file(a[0])\n"                           # a grep hit
        "f = read_file('urllib/parse.py:4')\n"            # path:line
        "g = grep('urlparse', file='distutils/command/upload.py', flags=2)\n"
        "print(a == b, a[0]['file'], a[0]['line'], len(c), d[0]['file'], d[0]['line'], '4: def urlparse' in e,"
        " '4: def urlparse' in f, len(g))\n"
        "words = ('ok', 'then')\nFINAL(*words)")  # several values, joined like print
    llm.script("root", repl("print(1)"), repl(code))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.error is None and r.answer == "ok then"
    assert r.of("output")[-1]["output"].strip() == "True urllib/parse.py 4 3 urllib/parse.py 4 True True 2"


def test_a_wrong_helper_call_says_how_to_call_it(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("grep(r'x', object())"), repl("grep(r'x', object())"), repl("FINAL(len(files))"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "2"
    first = last_user(llm.chat_requests("root")[1])
    assert "Usage: grep(pattern, path_glob=None" in first
    second = last_user(llm.chat_requests("root")[2])
    assert "This is the same error as in your previous turn" in second and "The right call: grep(" in second


def test_llm_query_reads_extra_arguments_as_text(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", lambda req: f"got {len(last_user(req))} chars: {last_user(req)[:9]}")
    llm.script("root", repl("print(1)"), repl(
        "x = llm_query('Summarise:', read_file('urllib/parse.py'))\n"
        "ys = llm_query_batched('Count:', ['aa', 'bbbb'])\nFINAL(x + ' | ' + ' | '.join(ys))"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer.startswith("got ") and "Summarise" in r.answer and "Count:\n\naa" not in r.answer
    subs = [last_user(q) for q in llm.chat_requests("sub")]
    assert any(s.startswith("Summarise:\n\n1: import re") for s in subs)
    assert "Count:\n\naa" in subs and "Count:\n\nbbbb" in subs


def test_repeated_code_and_iterations_left_are_told(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(context))"), repl("print(len(context))"), repl("print(2)"),
               repl("FINAL('x')"))
    r = run(llm, [code_corpus(tmp_path)], max_iterations=5)
    assert r.answer == "x"
    reqs = llm.chat_requests("root")
    assert "(4 iterations left.)" in last_user(reqs[1])
    assert prompts.REPEATED_CODE in last_user(reqs[2]) and "Only 3 iterations left" in last_user(reqs[2])
    # The repeated turn replaced the one it repeats: one copy in the history, not a pattern to copy.
    assert len(assistant_turns(reqs[2])) == 1 and len(assistant_turns(reqs[3])) == 2
    assert prompts.REPEATED_CODE not in last_user(reqs[3])
    # every feedback message ends by repeating the question (small models lose track of it)
    assert all(last_user(q).endswith("(The question: What is it?)") for q in reqs[1:])


def test_prose_that_does_not_answer_is_not_taken_as_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(context))"), "The corpus is too large to read at once.",
               "I will need to search it first.", repl("FINAL('found it')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.error is None and r.answer == "found it"
    reqs = llm.chat_requests("root")
    assert prompts.FORMAT_REMINDER in last_user(reqs[2]) and prompts.NOT_AN_ANSWER in last_user(reqs[3])


# -- through the real command (issue #15 items 3 and 4) ---------------------------------------------

def test_text_final_of_a_variable_gives_its_value(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("x = 'forty-two'\nprint(x)"), "The value is in x.\nFINAL(x)")
    res = run_rlm("ask", str(corpus(tmp_path)), "What is x?", *model_flags(llm))
    assert res.code == 0, res.stderr
    assert res.stdout == "forty-two\n"


def test_bare_final_var_of_a_sentence_is_that_sentence(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(context[:30])"), 'FINAL_VAR("The notes list four Greek letters.")',
               repl("FINAL('should not be needed')"))
    res = run_rlm("ask", str(corpus(tmp_path)), "What do the notes list?", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "The notes list four Greek letters." and doc["iterations"] == 2
    assert "FINAL in prose" not in res.stderr


def test_iteration_limit_never_prints_raw_code_as_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(1)"), repl("print(2)"), repl("print('still exploring')"))
    res = run_rlm("ask", str(corpus(tmp_path)), "What is it?", *model_flags(llm), "--max-iterations", "2")
    assert res.code == 5, res.stderr
    assert "```" not in res.stdout and "print(" not in res.stdout
    assert res.stdout.startswith("No final answer yet") and res.stdout.rstrip().endswith("\n2")


def test_written_out_final_in_a_block_that_printed_unseen_output_is_refused(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(files))"),
               repl("hits = grep('def urlparse')\nprint(hits)\nFINAL('distutils/command/upload.py')"),
               repl("FINAL(hits[0]['file'])"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "urllib/parse.py"
    assert prompts.FINAL_WITH_UNSEEN_CODE in last_user(llm.chat_requests("root")[2])


def test_a_final_answer_line_in_prose_ends_the_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(grep('def urlparse'))"), "**Final answer:** urllib/parse.py, line 4.")
    r = run(llm, [code_corpus(tmp_path)])
    assert r.error is None and r.answer == "urllib/parse.py, line 4."
    assert len(llm.chat_requests("root")) == 2


def test_reassigning_context_is_pointed_out_and_undone(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("context = 'def f(): return str(1)'\nprint(len(grep('str', context)))"),
               repl("print(len(context) > 100)"), repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "ok"
    first = last_user(llm.chat_requests("root")[1])
    assert "this block reassigned `context`" in first
    assert "True" in last_user(llm.chat_requests("root")[2])


def test_a_final_next_to_code_it_already_ran_is_accepted(tmp_path: Path, llm: FakeLLM) -> None:
    """Output of code the model ran before is output it has seen: a weak model that repeats its
    last block before finishing must not be refused until the iteration limit."""
    again = "```repl\nprint(grep('def urlparse'))\n```\nFinal answer: urllib/parse.py\n```repl\nFINAL('urllib/parse.py')\n```"
    llm.script("root", repl("print(grep('def urlparse'))"), again, repl("FINAL('refused before')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.error is None and r.answer == "urllib/parse.py"
    assert len(llm.chat_requests("root")) == 2
    # The same reply on the first turn has not seen its output: refused there.
    llm.script("root", again.replace("Final answer: urllib/parse.py\n", ""), repl("FINAL('after seeing it')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "after seeing it"


def test_context_indexed_by_a_path_is_that_files_text(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(context['urllib/parse.py'].split('\\n')[3], context['upload.py'][:4], "
                            "type(context[0:3]).__name__, 'urllib/parse.py' in context)\ncontext['nope.py']"),
               repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "ok"
    out = r.of("output")[0]["output"]
    assert out.startswith("def urlparse(url, scheme='', allow_fragments=True): from str True")
    assert "KeyError" in out and "no file 'nope.py'" in out


def test_replies_are_capped_at_the_windows_reply_room(tmp_path: Path, llm: FakeLLM) -> None:
    """A small model stuck repeating itself stops at max_tokens instead of filling the server's
    context (seen: one root call ran 15 minutes)."""
    from rlm_cli.models.window import reply_tokens

    llm.default("sub", "ok")
    llm.script("root", repl("print(llm_query('hi'))"), repl("FINAL('done')"))
    r = run(llm, [code_corpus(tmp_path)], root_model_window=16_384, sub_model_window=8_192)
    assert r.answer == "done"
    assert {q["max_tokens"] for q in llm.chat_requests("root")} == {reply_tokens(16_384)} == {3_276}
    assert {q["max_tokens"] for q in llm.chat_requests("sub")} == {reply_tokens(8_192)} == {1_638}


def test_result_rows_answer_the_key_names_models_guess(tmp_path: Path, llm: FakeLLM) -> None:
    code = ("h = grep('def urlparse')[0]\nc = chunks[0]\nf = [x for x in files if x['path'].endswith('parse.py')][0]\n"
            "print(h['path'], h['lineno'], c['file'], c['text'][:6], f['text'][:6], repr(h))\n"
            "s = search('scheme allow_fragments')[0]\nprint(s['path'], s['line'], 'def urlparse' in s['text'])\n"
            "h['nope']")
    llm.script("root", repl(code), repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "ok"
    out = r.of("output")[0]["output"]
    assert out.startswith("urllib/parse.py 4 ")
    assert "import" in out.split("\n")[0] and "'path'" not in out.split("\n")[0]  # repr shows the real keys only
    assert "urllib/parse.py 1 True" in out
    assert "KeyError: \"'nope': this row has the keys ['file', 'line', 'text']\"" in out


def test_a_written_out_answer_next_to_a_failing_block_is_refused(tmp_path: Path, llm: FakeLLM) -> None:
    broken = "```repl\nprint(grep('x')[0]['missing_key'])\n```\nFinal answer: guessed.py"
    llm.script("root", repl("print(1)"), broken, broken, repl("FINAL('after fixing it')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "after fixing it"
    assert prompts.FINAL_WITH_UNSEEN_CODE in last_user(llm.chat_requests("root")[2])


def test_an_answer_that_found_nothing_gets_one_second_look(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(grep('def url_parse'))"), repl("FINAL('urlparse is not found in the corpus')"),
               repl("print(grep('def urlparse'))"), repl("FINAL(grep('def urlparse')[0]['file'])"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "urllib/parse.py"
    assert prompts.CHECK_NEGATIVE in last_user(llm.chat_requests("root")[2])
    # Once per run: the same answer again is accepted.
    before = len(llm.chat_requests("root"))
    llm.script("root", repl("print(1)"), repl("FINAL('No such function.')"), repl("FINAL('No such function.')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "No such function." and len(llm.chat_requests("root")) - before == 3


def test_looping_over_context_itself_is_told_it_goes_by_character(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: this found nothing, and it answered that the corpus had no such line.
    llm.script("root", repl("hits = [line for line in context if 'def urlparse' in line]\nprint(hits)"),
               repl("for line in context.splitlines():\n    if 'def urlparse' in line:\n        print(line)"),
               repl("FINAL('done')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "done"
    first, second = (e["output"] for e in r.of("output")[:2])
    assert first.startswith("[]") and "one character at a time" in first and "context.splitlines()" in first
    assert "def urlparse(url" in second and "one character" not in second


def test_chunk_text_of_a_character_offset_is_the_chunk_holding_it(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(chunk_text(context.find('def urlparse'))[:10], chunk_text(10 ** 9))"),
               repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    out = r.of("output")[0]["output"]
    assert out.startswith("Traceback") and "chunk 1000000000 does not exist" in out
    llm.script("root", repl("print(chunk_text(context.find('def urlparse'))[:10])"), repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.of("output")[0]["output"].strip() == "import re"


def test_joining_result_rows_as_strings_gets_a_hint(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(', '.join(grep(r'def urlparse')))"), repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    out = r.of("output")[0]["output"]
    assert "expected str instance, Hit found" in out and "grep and search return rows (dicts)" in out


@pytest.mark.parametrize("spelling", ["Final", "final"])
def test_final_spelled_otherwise_finishes_the_run(tmp_path: Path, llm: FakeLLM, spelling: str) -> None:
    # Seen with the 1.5B model: Final(...) 8 times in a row despite the hint, then the time ran out.
    llm.script("root", repl("print(grep('def urlparse'))"), repl(f"{spelling}('urllib/parse.py')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.error is None and r.answer == "urllib/parse.py" and len(r.of("root_call")) == 2


def test_a_variable_named_final_is_left_alone_and_final_var_misspelled_gets_a_hint(tmp_path: Path,
                                                                                    llm: FakeLLM) -> None:
    llm.script("root", repl("final = 'urllib/parse.py'\nprint(len(final))"), repl("Final_Var('final')"),
               repl("FINAL_VAR('final')"))
    r = run(llm, [code_corpus(tmp_path)])
    outs = [o["output"] for o in r.of("output")]
    assert outs[0].strip() == "15"
    assert "NameError" in outs[1] and "hint: `Final_Var` is spelled in capitals" in outs[1]
    assert r.answer == "urllib/parse.py"  # `final` stays the model's variable in later blocks


def test_a_name_no_block_assigned_gets_an_assignment_to_copy_and_a_module_an_import(tmp_path: Path,
                                                                                    llm: FakeLLM) -> None:
    # Seen with the 1.5B model: llm_map(lines, ...) with no `lines`, 71 times in 9 trajectories.
    llm.script("root", repl("kinds = llm_map(lines, 'What kind?')"), repl("print(re.escape('a.b'))"),
               repl("print(grep_files('def '))"), repl("print(len(code))"), repl("FINAL('done')"))
    r = run(llm, [code_corpus(tmp_path)], "What does distutils/command/upload.py define?")
    unassigned, module, function, variable = (o["output"] for o in r.of("output")[:4])
    assert "NameError: name 'lines' is not defined" in unassigned
    assert ("hint: no code has assigned `lines` yet: a variable exists only after a block assigns it. Assign it "
            "first, in this block, e.g. for a file's lines: lines = context['distutils/command/upload.py'].splitlines()"
            ) in unassigned  # the file the question names, not the largest
    assert "hint: `re` is a module: `import re` first" in module
    assert "nothing here defines a function `grep_files`" in function and "assigned" not in function
    assert "no code has assigned `code` yet" in variable and "is a module" not in variable  # a module name as a variable


def test_a_model_stuck_on_the_same_code_is_asked_for_its_answer_once(tmp_path: Path, llm: FakeLLM) -> None:
    same = repl("print(grep('def urlparse'))")
    llm.script("root", same, same, same, "urlparse is defined in urllib/parse.py, line 4.")
    r = run(llm, [code_corpus(tmp_path)], "Which file defines urlparse?", max_iterations=10)
    assert r.error is None and r.answer == "urlparse is defined in urllib/parse.py, line 4."
    reqs = llm.chat_requests("root")
    assert len(reqs) == 4 and prompts.STUCK_ANSWER in last_user(reqs[3])
    assert prompts.REPEATED_CODE in last_user(reqs[2]) and prompts.answer_now(2) in last_user(reqs[3])
    # From the second repeat on the history grows, so no two requests are the same, and a request
    # after a repeat is resampled.
    assert len({json.dumps(q["messages"]) for q in reqs}) == 4
    assert [q.get("temperature") for q in reqs] == [None, None, 1.0, 1.0]
    assert any("asked for its answer" in n for n in r.notices())


def test_a_stuck_model_that_still_has_no_answer_is_told_to_search_differently(tmp_path: Path, llm: FakeLLM) -> None:
    same = repl("print(len(files))")
    llm.script("root", same, same, same, "The files are:\n```repl\nprint(files)\n```", repl("FINAL('2 files')"))
    r = run(llm, [code_corpus(tmp_path)], max_iterations=10)
    assert r.error is None and r.answer == "2 files"  # a lead-in to code it could not run is no answer
    assert prompts.SEARCH_DIFFERENTLY in last_user(llm.chat_requests("root")[4])


def test_a_repeated_error_names_the_failing_line_and_the_helper_it_misuses(tmp_path: Path, llm: FakeLLM) -> None:
    bad = repl("codes = [1.5]\nfor c in codes:\n    print(chunk_text(c))")
    llm.script("root", bad, bad, repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "ok"
    first_out = r.of("output")[0]["output"]
    assert '  File "<cell 1>", line 3, in <module>\n    print(chunk_text(c))' in first_out  # the line, not only its number
    note = last_user(llm.chat_requests("root")[2])
    assert "(in the line `print(chunk_text(c))`)" in note and prompts.HELPER_USAGE["chunk_text"] in note


def test_open_reads_a_corpus_file_by_its_corpus_path_and_stays_open_for_the_rest(tmp_path: Path,
                                                                                   llm: FakeLLM) -> None:
    code = ("with open('urllib/parse.py') as fh:\n    n = sum(1 for line in fh if 'def ' in line)\n"
            "b = open('/somewhere/lib/distutils/command/upload.py', 'rb').read()\n"
            "with open('notes.txt', 'w') as out:\n    out.write('scratch')\n"
            "print(n, b[:4], open('notes.txt').read())")
    llm.script("root", repl(code), repl("FINAL('ok')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "ok"
    assert r.of("output")[0]["output"].strip() == "1 b'from' scratch"


def test_a_stuck_model_s_answer_is_taken_without_the_note_it_imitates(tmp_path: Path, llm: FakeLLM) -> None:
    same = repl("print(len(files))")
    llm.script("root", same, same, same, "There are 2 files.\n\n[You can now call FINAL(answer) if you have the answer.]")
    r = run(llm, [code_corpus(tmp_path)], max_iterations=10)
    assert r.error is None and r.answer == "There are 2 files."


def test_a_stuck_model_may_answer_with_final_in_a_code_block(tmp_path: Path, llm: FakeLLM) -> None:
    same = repl("print(len(files))")
    llm.script("root", same, same, same, repl("FINAL('via-block')"))
    r = run(llm, [code_corpus(tmp_path)], max_iterations=10)
    assert r.error is None and r.answer == "via-block"


def test_a_final_block_in_the_last_reply_at_the_iteration_limit_is_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(1)"), repl("print(2)"), repl("FINAL('x')"))
    r = run(llm, [code_corpus(tmp_path)], max_iterations=2)
    assert r.answer == "x" and r.error is not None and r.error.exit_code == 5


@pytest.mark.parametrize("spelling", ["Final", "final"])
def test_final_spelled_otherwise_in_the_last_reply_at_the_iteration_limit_is_run(tmp_path: Path, llm: FakeLLM,
                                                                                spelling: str) -> None:
    llm.script("root", repl("print(1)"), repl(f"x = 41 + 1\n{spelling}(x)"))
    r = run(llm, [code_corpus(tmp_path)], max_iterations=1)
    assert r.answer == "42" and r.error is not None and r.error.exit_code == 5


def test_a_question_with_bytes_that_are_not_utf8_is_asked_with_replacement_characters(tmp_path: Path,
                                                                                     llm: FakeLLM) -> None:
    llm.script("root", repl("print(question)"), repl("FINAL('ok')"))
    res = run_rlm("ask", str(corpus(tmp_path)), "what\udcff is it?", *model_flags(llm), "--mode", "rlm",
                  "--no-llm-cache")
    assert res.code == 0 and res.stdout.strip() == "ok", res.stderr
    assert "what\ufffd is it?" in str(llm.chat_requests("root")[1]["messages"])


def test_final_of_a_name_never_assigned_is_not_taken_as_the_word(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(1)"), "The answer to the question is:\n4\nFINAL(answer)", repl("FINAL('4')"),
               repl("FINAL('4')"), repl("FINAL('4')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.error is None and r.answer == "4"
    assert "NameError" in last_user(llm.chat_requests("root")[2])
    # "4" is nowhere in what the REPL printed: asked once to check it (guided), then taken; the
    # guess given again earns one last request to show it with code (issue 37), and stays a guess.
    assert prompts.ungrounded(["4"]) in last_user(llm.chat_requests("root")[3])
    assert "rlm will mark it as a guess" in last_user(llm.chat_requests("root")[4])
    assert r.outcome.result.support.verdict == "unsupported"


def test_an_answer_that_leaves_out_items_the_question_lists_is_sent_back_once(tmp_path: Path, llm: FakeLLM) -> None:
    question = "What do `urlparse`, `upload` and `urljoin` take?"
    llm.script("root", repl("print(grep('def url'))"), repl("FINAL('urlparse takes url, scheme and allow_fragments')"),
               repl("FINAL('urlparse takes url, scheme, allow_fragments; upload takes nothing; urljoin takes "
                    "base and url')"))
    r = run(llm, [code_corpus(tmp_path)], question)
    assert r.answer.startswith("urlparse takes url, scheme, allow_fragments; upload")
    told = last_user(llm.chat_requests("root")[2])
    assert "leaves out 'upload', 'urljoin'" in told and "Answer about all of them in one FINAL" in told
    (sent,) = [e for e in r.of("check") if e["verdict"] == "send_back"]
    assert sent["check"] == "listed_items" and sent["answer"] == "urlparse takes url, scheme and allow_fragments"
    # Once per run: the same short answer again is accepted.
    before = len(llm.chat_requests("root"))
    llm.script("root", repl("print(1)"), repl("FINAL('urlparse takes url')"), repl("FINAL('urlparse takes url')"))
    r = run(llm, [code_corpus(tmp_path)], question)
    assert r.answer == "urlparse takes url" and len(llm.chat_requests("root")) - before == 3


def test_search_takes_grep_s_case_flags_and_ignores_them(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: search(..., ignore_case=True) failed the same way until the stuck answer.
    llm.script("root", repl("print(search('urlparse scheme', ignore_case=True)[0]['file'])"), repl("FINAL('done')"))
    r = run(llm, [code_corpus(tmp_path)])
    assert r.answer == "done" and r.of("output")[0]["output"].startswith("urllib/parse.py")


def test_an_answer_split_over_several_final_blocks_is_joined(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model on a three-part question: one FINAL block per part.
    split = ("a is in x.\n```repl\nFINAL('urlparse: urllib/parse.py')\n```\nb too.\n"
             "```repl\nFINAL('upload: distutils/command/upload.py')\n```\nDone.")
    llm.script("root", repl("print(grep('def '))"), split, split)  # urljoin is left out: sent back once
    question = "Which files define urlparse, upload and urljoin?"
    r = run(llm, [code_corpus(tmp_path)], question)
    assert r.answer == "urlparse: urllib/parse.py\nupload: distutils/command/upload.py"
    assert "leaves out 'urljoin'" in last_user(llm.chat_requests("root")[2])
    joined = [e for e in r.of("check") if e["verdict"] == "rewrite"]
    assert joined and joined[-1]["check"] == "listed_items" and joined[-1]["rewritten"] == r.answer
    # A block that computes something ends the joining: the first FINAL stands alone.
    llm.script("root", repl("print(grep('def '))"),
               "```repl\nFINAL('urlparse: urllib/parse.py')\n```\n```repl\nx = 1\nFINAL('upload: upload.py')\n```",
               repl("FINAL('urlparse: urllib/parse.py')"))  # the same one-part answer, sent back once
    r = run(llm, [code_corpus(tmp_path)], question)
    assert r.answer == "urlparse: urllib/parse.py"


def test_the_missing_items_note_quotes_the_lines_the_repl_already_showed(tmp_path: Path, llm: FakeLLM) -> None:
    text = "".join(f"The code of the {p} project is {k}.\n" for p, k in
                   (("red fox", "R-1"), ("blue owl", "B-2"), ("green elk", "G-3")))
    llm.script("root", repl("for h in grep('code of'):\n    print(h['text'])"), repl("FINAL('red fox: R-1')"),
               repl("FINAL('red fox: R-1; blue owl: B-2; green elk: G-3')"))
    r = run(llm, [corpus(tmp_path, text)], "What are the codes of the red fox, blue owl and green elk projects?",
            leads=False)
    assert r.answer == "red fox: R-1; blue owl: B-2; green elk: G-3"
    told = last_user(llm.chat_requests("root")[2])
    assert "\n  The code of the blue owl project is B-2.\n  The code of the green elk project is G-3.\n" in told


LOG = "".join(f"2026-11-0{i % 9 + 1} service={s} level={lv} latency_ms={ms}\n" for i, (s, lv, ms) in enumerate(
    [("api", "ERROR", 10), ("api", "INFO", 20), ("db", "ERROR", 30)] * 5 + [("api", "ERROR", 7)]))


def test_a_figure_from_code_or_a_count_the_leads_computed_is_taken_at_once(tmp_path: Path, llm: FakeLLM) -> None:
    log = corpus(tmp_path, LOG, "notes.log")
    llm.script("root", repl("FINAL(sum(1 for l in context.splitlines() if 'service=db' in l))"))
    r = run(llm, [log], "How many lines have service=db?")
    assert r.answer == "5" and len(llm.chat_requests("root")) == 1  # computed by code: no send-back
    # "`urlparse` is called ... inside 1 definition" in the leads is a count over every line, not a sample.
    llm.script("root", repl("FINAL('1')"))
    before = len(llm.chat_requests("root"))
    r = run(llm, [code_corpus(tmp_path)], "How many functions call `urlparse`?")
    assert r.answer == "1" and len(llm.chat_requests("root")) - before == 1
    # A question that asks for no figure is answered from the leads as before.
    llm.script("root", repl("FINAL('urllib/parse.py')"))
    assert run(llm, [code_corpus(tmp_path)], "Which file defines `urlparse`?").answer == "urllib/parse.py"


def test_a_grep_that_stopped_at_max_results_says_there_may_be_more(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(grep('service=api', max_results=5)))"),
               repl("print(len(grep('service=api', max_results=None)))"), repl("FINAL('done')"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], leads=False)
    first, second = (o["output"] for o in r.of("output")[:2])
    assert first.startswith("5\n") and "stopped at max_results=5" in first and "max_results=None" in first
    assert second.strip() == "11" and "stopped at" not in second


def test_answers_that_each_give_other_listed_items_are_joined(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: one item per answer, a different one after the note (sent back once).
    text = "".join(f"The code of the {p} project is {k}.\n" for p, k in
                   (("red fox", "R-1"), ("blue owl", "B-2"), ("green elk", "G-3")))
    question = "What are the codes of the red fox, blue owl and green elk projects?"
    llm.script("root", repl("print(grep('code of'))"), repl("FINAL('green elk: G-3')"), repl("FINAL('red fox: R-1')"),
               repl("FINAL('never asked')"))
    r = run(llm, [corpus(tmp_path, text)], question, leads=False)
    assert r.answer == "green elk: G-3\nred fox: R-1" and len(llm.chat_requests("root")) == 3
    assert "leaves out 'red fox', 'blue owl'" in last_user(llm.chat_requests("root")[2])
    assert [e["verdict"] for e in r.of("check") if e["check"] == "listed_items"] == ["send_back", "rewrite"]
    # A later answer about an item replaces the earlier one; no progress: taken as it is.
    llm.script("root", repl("print(grep('code of'))"), repl("FINAL('red fox: R-9')"),
               repl("FINAL('red fox: R-1; blue owl: B-2')"), repl("FINAL('red fox: R-1; blue owl: B-2')"))
    r = run(llm, [corpus(tmp_path, text)], question, leads=False)
    assert r.answer == "red fox: R-1; blue owl: B-2"


def test_a_figure_of_zero_gets_one_look_at_the_filter_and_number_parsing_gets_a_hint(tmp_path: Path,
                                                                                     llm: FakeLLM) -> None:
    # Seen with the 1.5B model: int(text.split(" ")[-1]) failed on every line; a filter then kept none: "0".
    broken = "print(sum(int(h['text'].split('=')[1]) for h in grep('service=db')))"
    zero = "print(sum(1 for h in grep('service=db') if h['text'].endswith('x')))"
    llm.script("root", repl(broken), repl(zero), "Final answer: 0",
               repl("print(sum(int(h['match']) for h in grep(r'latency_ms=(\\d+)') if 'service=db' in h['text']))"),
               repl("FINAL('150')"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], "What is the total latency_ms of the lines with service=db?",
            leads=False)
    assert r.answer == "150"  # 5 lines x 30
    assert "h['match'] of a grep whose pattern has one group" in r.of("output")[0]["output"]
    assert prompts.CHECK_ZERO in last_user(llm.chat_requests("root")[3])


def test_a_count_of_none_in_words_gets_the_same_look(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: grep(r"service=mailer and level=WARN") matched nothing; "No lines have ...".
    llm.script("root", repl("print(len(grep('service=api and level=ERROR')))"),
               repl("FINAL('No lines have service=api and level=ERROR.')"), repl("FINAL('still none')"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], "How many lines have service=api and level=ERROR?", leads=False)
    assert r.answer == "still none"
    assert prompts.CHECK_ZERO in last_user(llm.chat_requests("root")[2])


def test_a_figure_over_grep_s_default_cap_and_an_empty_answer_are_sent_back_once(tmp_path: Path,
                                                                                    llm: FakeLLM) -> None:
    # Seen in a trial: n = len(grep(...)) then FINAL(str(n)) answered 200 (the old default cap) for 233,309
    # lines. The default cap is now 100,000; a figure given in a turn that hit it is sent back once.
    many = corpus(tmp_path, "hit\n" * 100_005, "many.txt")
    llm.script("root", repl("print(len(files))"), repl("n = len(grep('hit'))\nFINAL(str(n))"),
               repl("FINAL(str(len(grep('hit', max_results=None))))"))
    r = run(llm, [many], "How many lines say hit?", leads=False)
    assert r.answer == "100005"
    told = last_user(llm.chat_requests("root")[2])
    assert "stopped at its default max_results" in told and "(its default)" in told
    assert [e["check"] for e in r.of("check") if e["verdict"] == "send_back"] == ["default_cap"]
    # A cap the model chose is its own decision: no send-back.
    llm.script("root", repl("FINAL(grep('service=db', max_results=1)[0]['text'].split()[0])"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], "On which day does a db line appear first?", leads=False)
    assert r.answer == "2026-11-03"
    llm.script("root", repl("print(1)"), repl("FINAL(None)"), repl("FINAL('')"), repl("FINAL('')"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], leads=False)
    assert r.answer == "" and prompts.EMPTY_FINAL in last_user(llm.chat_requests("root")[-2])
    # nothing again past the limit: one last request to show it with code (guided), then a guess
    assert "rlm will mark it as a guess" in last_user(llm.chat_requests("root")[-1])
    assert r.outcome.result.support.verdict == "unsupported"


def test_the_same_prose_answer_again_turns_apart_is_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model (needle-8): prose answer, a block, the same prose answer, a block...
    # never two replies without code in a row, so it ran to the iteration limit.
    said = "The code of the urlparse module is in urllib/parse.py."
    llm.script("root", repl("print(1)"), said, repl("print(2)"), said, repl("FINAL('never reached')"))
    r = run(llm, [code_corpus(tmp_path)], "Where is urlparse?", leads=False)
    assert r.answer == said and len(llm.chat_requests("root")) == 4
    assert any("the same answer in prose again" in n for n in r.notices())


def test_a_stuck_model_s_answer_gets_the_same_second_look(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model (needle, seed 2): stuck on one search, it answered one of three projects.
    text = "".join(f"The code of the {p} project is {k}.\n" for p, k in
                   (("red fox", "R-1"), ("blue owl", "B-2"), ("green elk", "G-3")))
    same = repl("print(grep('code of'))")
    llm.script("root", same, same, same, "The code of the red fox project is R-1.",
               repl("FINAL('red fox: R-1; blue owl: B-2; green elk: G-3')"))
    r = run(llm, [corpus(tmp_path, text)], "What are the codes of the red fox, blue owl and green elk projects?",
            leads=False, max_iterations=10)
    assert r.answer == "red fox: R-1; blue owl: B-2; green elk: G-3"
    assert "leaves out 'blue owl', 'green elk'" in last_user(llm.chat_requests("root")[4])


def test_final_var_of_a_computed_figure_is_not_a_written_out_one(tmp_path: Path, llm: FakeLLM) -> None:
    # FINAL_VAR('n') hands over a value code computed (only_finishes: it has a literal argument).
    llm.script("root", repl("n = str(sum(1 for l in context.splitlines() if 'service=db' in l))"),
               repl("FINAL_VAR('n')"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], "How many lines have service=db?", leads=False)
    assert r.answer == "5" and len(llm.chat_requests("root")) == 2


def test_a_traceback_s_line_number_is_no_printed_figure_and_search_takes_max_results_none(tmp_path: Path,
                                                                                          llm: FakeLLM) -> None:
    # Seen in a new-user trial: search(..., max_results=None) failed; its traceback's "line 1"
    # then counted as the printed support of the answer "1" (the true count is 6).
    llm.script("root", repl("int('x')"),
               "Final answer: there is 1 such line",
               repl("print(len(search('service db', max_results=None)))"), repl("FINAL('done')"))
    r = run(llm, [corpus(tmp_path, LOG, "notes.log")], "How many lines have service=api and level=ERROR?", leads=False)
    assert prompts.ungrounded(["1"]) in last_user(llm.chat_requests("root")[2])
    assert r.answer == "done" and r.of("output")[-2]["output"].strip() == "1"  # the one chunk: no TypeError


def test_the_same_error_turn_after_turn_counts_as_stuck_and_files_indexed_by_path_gets_a_hint(
        tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: files["path"][21:23], the slice shifted by one each turn, the same
    # TypeError 19 turns in a row (never the same code twice, so never "repeated code").
    bad = [repl(f"print(files['urllib/parse.py'][{i}:23])") for i in range(4)]
    llm.script("root", *bad, "urlparse is defined in urllib/parse.py.")
    r = run(llm, [code_corpus(tmp_path)], "Where is urlparse defined?", max_iterations=10, leads=False)
    assert r.answer == "urlparse is defined in urllib/parse.py."
    reqs = llm.chat_requests("root")
    assert len(reqs) == 5 and prompts.STUCK_ANSWER in last_user(reqs[4])
    assert "`files` is a list of dicts, one per file" in r.of("output")[0]["output"]


ACCESS = "".join(f'10.0.0.{i % 7} - - [14/Sep/2026:06:{i % 60:02d}:00 +0200] "GET /p{i % 3} HTTP/1.1" '
                 f'{500 if i % 5 == 0 else 200} {100 + i} "-" "curl/8"\n' for i in range(40))


def test_a_grep_that_matches_nothing_shows_the_lines_that_hold_its_words(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen with the 1.5B model: grep(r"HTTP/1.1 500") over lines reading `HTTP/1.1" 500` (a quote
    # between) gave [], and "no request failed with a 500" followed.
    llm.script("root", repl("print(grep(r'HTTP/1.1 500'))"), repl("print(grep(r'zzqx 500'))"),
               repl("print(grep('GET', path_glob='nowhere/*.log'))"), repl("FINAL('done')"))
    r = run(llm, [corpus(tmp_path, ACCESS, "access.log")], "How many requests failed with a 500?", leads=False)
    assert r.answer == "done"
    reqs = llm.chat_requests("root")
    told = last_user(reqs[1])
    assert "matched no line, but some lines hold 'HTTP', '500' (any case, anything between), such as" in told
    assert 'access.log:1: 10.0.0.0 - - [14/Sep/2026:06:00:00 +0200] "GET /p0 HTTP/1.1" 500 100' in told
    # ... and where the pattern stops fitting them: the quote the model did not expect.
    assert "In the first, 'HTTP/1.1' fits, then the line goes on with '\" 500 100 \"-', where the pattern wants ' 500'" in told
    assert "and no line holds all of 'zzqx', '500' in any case either" in last_user(reqs[2])
    assert "no corpus file matches path_glob 'nowhere/*.log'" in last_user(reqs[3])
    # The note is rlm's words, not what the code printed: a partial answer leaves it out.
    first = r.of("output")[0]["output"]
    assert "matched no line" in first and "matched no line" not in model_output(first)


def test_a_loop_over_read_file_or_a_files_text_gives_its_lines(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen: `for line in read_file(path): ip = line.split()[0]` looped over characters (IndexError on
    # " "), then counted 0 addresses. A loop over read_file gives the file's lines without numbers.
    code = ("ips = {line.split()[0] for line in read_file('access.log') if line.strip()}\n"
            "same = {line.split()[0] for line in context['access.log']}\n"
            "print(len(ips), ips == same, read_file('access.log', 2, 2))")
    llm.script("root", repl(code), repl("FINAL(len(ips))"))
    r = run(llm, [corpus(tmp_path, ACCESS, "access.log")], "How many client addresses are there?", leads=False)
    assert r.answer == "7"
    assert "7 True 2: 10.0.0.1 - -" in last_user(llm.chat_requests("root")[1])


def test_a_path_glob_may_leave_out_the_leading_folders(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("FINAL(len(grep('def ', path_glob='command/upload.py')) + len(grep('def ', 'command/*.py')))"))
    assert run(llm, [code_corpus(tmp_path)], "How many definitions?", leads=False).answer == "2"


def test_a_loop_over_leads_says_where_the_lines_and_rows_are(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen three turns in a row with the 1.5B model: `for line in leads:` and a bare "'function'
    # object is not iterable" each time.
    llm.script("root", repl("n = sum(1 for line in leads if '500' in line['text'])"),
               repl("leads('500')\nFINAL(len(grep(' 500 ')))"))
    r = run(llm, [corpus(tmp_path, ACCESS, "access.log")], "How many requests failed with a 500?", leads=False)
    assert r.answer == "8"
    told = last_user(llm.chat_requests("root")[1])
    assert "leads is a function that prints a keyword search; it holds no lines or rows to loop over" in told


def test_a_loop_over_what_leads_printed_gives_lines(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("n = 0\nfor line in leads('urlparse'):\n    n += 1\nprint('lines', n)"), repl("FINAL(n)"))
    r = run(llm, [code_corpus(tmp_path)], "Where is urlparse?", leads=False)
    shown = r.of("output")[0]["output"]
    assert int(r.answer) == shown.count("\n") - 1 > 1  # every line it printed, then "lines n"
