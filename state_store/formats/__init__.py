"""State file formats (not pure: uses pyarrow). See ``keyed`` for the schema and ``json_codec`` for
the exact encoding of keys, namespaces and values."""

from state_store.formats.json_codec import (
    StateValueError,
    key_from_json,
    key_to_json,
    value_from_json,
    value_to_json,
)
from state_store.formats.keyed import (
    FORMAT_VERSION,
    FORMATS,
    SCHEMA,
    StateFileError,
    decode_key_groups,
    encode_each_key_group,
    encode_key_groups,
    format_of,
    read_state_file,
    write_state_file,
)

__all__ = [
    "FORMATS",
    "FORMAT_VERSION",
    "SCHEMA",
    "StateFileError",
    "StateValueError",
    "decode_key_groups",
    "encode_each_key_group",
    "encode_key_groups",
    "format_of",
    "key_from_json",
    "key_to_json",
    "read_state_file",
    "value_from_json",
    "value_to_json",
    "write_state_file",
]
