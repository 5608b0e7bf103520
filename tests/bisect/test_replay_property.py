"""Property: any sequence of bisect actions, logged and replayed, gives the same state and decision."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from materialize.bisect import session
from materialize.bisect.state import parse_log, render_log

N = 8
position = st.integers(min_value=0, max_value=N)
action = st.one_of(
    st.tuples(st.just("good"), position, st.integers(1, 64)),
    st.tuples(st.just("bad"), position, st.one_of(st.none(), st.integers(1, 8))),
    st.tuples(st.just("skip"), position, st.none()),
    st.tuples(st.just("observe"), position, st.tuples(st.integers(1, 300), st.integers(0, 300), st.booleans())),
)


@settings(max_examples=40, deadline=None)
@given(actions=st.lists(action, max_size=12), requests=st.integers(1, 32))
def test_replay_is_exact(actions, requests) -> None:
    state = session.start(series="s", n_patches=N, good=0, bad=N, gate="stage3", requests=requests)
    for verb, pos, arg in actions:
        if verb == "good":
            session.mark(state, "good", pos, requests=arg)
        elif verb == "bad":
            session.mark(state, "bad", pos, requests=max(arg or 1, requests), failures=arg)
        elif verb == "skip":
            session.skip(state, pos)
        else:
            n, f, censored = arg
            session.observe(state, pos, source="record f.jsonl:3", requests=n, failures=min(f, n), censored=censored)
    again = session.replay(parse_log(render_log(state), "log"), "log", "s", N)
    assert again.observations == state.observations
    assert sorted(again.skipped) == sorted(state.skipped)
    a, b = session.decide(state), session.decide(again)
    assert (a.status, a.runs, a.culprit) == (b.status, b.runs, b.culprit)
