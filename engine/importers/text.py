"""The text of a model or graph message, checked before any of it is used.

onnx's messages are proto2: text that is not UTF-8 comes back from protobuf as bytes and
would flow into names, messages, logs and metadata; and a name of a megabyte is no name but a
way to make every message about it a megabyte. Both are refused at the door, naming where.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from ..errors import InvalidModel, bounded_text

# Characters in one name (graph, node, tensor, op type, domain). Exporters write a few
# hundred at most (torch's dynamo scopes); doc strings are free text and not bounded.
MAX_NAME_CHARS = 4096

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_FREE_TEXT = {"doc_string", "producer_version", "value"}  # metadata_props values too
# Message fields the importer never reads, so none of their text flows anywhere: not walked.
# A dynamo export writes a value_info (type, shape, dims) for every intermediate and
# metadata on every node: 45,695 messages of an unseen Qwen3-Next's, ~40% of its import.
_UNREAD = {"value_info", "metadata_props"}


def check_text(msg, where: str) -> None:
    """Every text field of `msg` and of the messages in it is UTF-8 and, but for free text,
    at most MAX_NAME_CHARS long; InvalidModel names the field and where it is."""
    _check(msg, (where,))


def _where(path: tuple) -> str:
    """`path` as the messages say it: where the walk began, then each named message."""
    return "".join((path[0], *(f" > {bounded_text(label, 60)}" for label in path[1:])))


def _is_map(field, value) -> bool:
    """Whether a message field's value is a map: told by the container (a map's has keys),
    not by the entry type's options: `GetOptions()` imports descriptor_pb2, 3-6 ms of the
    first model's import in a fresh process."""
    return field.is_repeated and hasattr(value, "keys")


def _check(msg, path: tuple) -> None:
    # Every message of a model is walked (each node, attribute and initializer): the
    # description of where it is is made only for an error.
    inner = None
    for field, value in msg.ListFields():
        if field.type == _STRING:
            for text in (value if field.is_repeated else (value,)):
                if isinstance(text, bytes):
                    raise InvalidModel(f"{_where(path)}: field '{field.name}' is not UTF-8 "
                                       f"text ({text[:40]!r})")
                if len(text) > MAX_NAME_CHARS and field.name not in _FREE_TEXT:
                    raise InvalidModel(f"{_where(path)}: field '{field.name}' has {len(text)} "
                                       f"characters, more than the {MAX_NAME_CHARS} a name "
                                       f"may have ('{bounded_text(text, 60)}')")
        elif field.type == _MESSAGE:
            if field.name in _UNREAD:
                continue
            if inner is None:
                label = getattr(msg, "name", "")
                inner = path + (label,) if isinstance(label, str) and label else path
            if _is_map(field, value):  # a map: its keys, its messages
                _check_name(field.name, list(value.keys()), path)
                items = [v for v in value.values() if hasattr(v, "ListFields")]
            else:
                items = value if field.is_repeated else (value,)
            for item in items:
                _check(item, inner)


def _check_name(field: str, texts: list, path: tuple) -> None:
    for text in texts:
        if isinstance(text, str) and len(text) > MAX_NAME_CHARS:
            raise InvalidModel(f"{_where(path)}: a key of '{field}' has {len(text)} "
                               f"characters, more than the {MAX_NAME_CHARS} a name may have")
