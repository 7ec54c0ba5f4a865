"""Whatever a run stored, the page keeps it as data: it can never end a <script> element or inject markup."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from lemon.inspection.view.build import render_page

TEMPLATE_SCRIPTS = render_page({}, []).count("</script")


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(alphabet=st.sampled_from(list("<>/!-\"'\\&script SCRIPT\u2028\x00ab")), max_size=40)
                   | st.text(max_size=40), min_size=1, max_size=5))
def test_stored_text_round_trips_and_never_closes_a_script(texts: list[str]) -> None:
    data = {"runs": texts, "source": "</script><script>alert(1)</script>"}
    traces = [json.dumps({"contents": {"a": t}}) for t in texts]
    page = render_page(data, traces)
    assert page.count("</script") == TEMPLATE_SCRIPTS + len(traces)  # one per trace block, none from the data
    blob = re.search(r'<script type="application/json" id="lemon-data">(.*?)</script>', page, re.S)
    assert blob is not None and json.loads(blob.group(1)) == data
    for i, t in enumerate(texts):
        block = re.search(rf'<script type="application/json" id="trace-{i}">(.*?)</script>', page, re.S)
        assert block is not None and json.loads(block.group(1)) == {"contents": {"a": t}}
