"""YAML that refuses a mapping key written twice (PyYAML keeps the last one silently, so a repeated `xfail` key or
sweep field would quietly drop the first)."""

from __future__ import annotations

from typing import Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _NoDuplicateKeysLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises on a key repeated in one mapping (keys merged in with ``<<`` may be overridden)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = first_lines.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error names it
                continue
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found the key {key!r} twice (first at line {first})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that raises ``yaml.YAMLError`` on a mapping key written twice."""
    return yaml.load(text, Loader=_NoDuplicateKeysLoader)  # a SafeLoader subclass: no arbitrary objects
