"""Names for JSON-shaped values [pure].

`JsonObject`: a JSON object as `json` decodes it, or a dict about to be encoded (a stored `*_json` column, an export
document's header, a figure's `as_dict`). Its keys are strings; its values are whatever JSON holds, typed `Any` as
`json.loads` types them: each reader checks the shape it reads (`store.runrows` for a run read back), and a recursive
union would make every reader narrow every key it reads.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]
