"""msop.kube.jsonpatch encodes strings as the API server's Go encoder does."""

from __future__ import annotations

import json

from msop.kube import jsonpatch


def test_escapes_like_go_and_decodes_to_the_same_value() -> None:
    value = {"m": '2 -> 3 <nil> & café \u2028\u2029 "q" \\ \n\t', "n": [1, None, True]}
    out = jsonpatch.dumps(value)
    assert out == (
        b'{"m":"2 -\\u003e 3 \\u003cnil\\u003e \\u0026 caf\xc3\xa9 \\u2028\\u2029 '
        b'\\"q\\" \\\\ \\n\\t","n":[1,null,true]}'
    )
    assert json.loads(out) == value
