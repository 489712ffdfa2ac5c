"""graphengine's descriptor pool: the generated stubs beside this module add their files
here, not to protobuf's default pool, and build their classes with `build` (copied from
runtime_ext/tools/stub_pool.py by proto_stubs.py, which says why)."""

from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper

POOL = descriptor_pool.DescriptorPool()


def _message_class(desc: Any, module_name: str, prefix: str) -> type:
    cls = message_factory.GetMessageClass(desc)
    for nested in desc.nested_types:  # attributes in upb already, not in pure Python
        setattr(cls, nested.name, _message_class(nested, module_name, prefix + desc.name + "."))
    cls.__module__, cls.__qualname__ = module_name, prefix + desc.name
    return cls


def build(file_desc: Any, module_name: str, module: dict[str, Any]) -> None:
    """A stub module's names: its enums (and their values), services and message classes.

    In place of protobuf's builder, whose registration of each class in the default symbol
    database adds the descriptor to the default pool under the pure-Python implementation.
    """
    if file_desc.extensions_by_name:
        raise NotImplementedError(f"{file_desc.name}: extensions are not built here")
    for name, enum in file_desc.enum_types_by_name.items():
        module["_" + name.upper()] = enum
        module[name] = enum_type_wrapper.EnumTypeWrapper(enum)
        module.update((value.name, value.number) for value in enum.values)
    for name, service in file_desc.services_by_name.items():
        module["_" + name.upper()] = service
    for name, desc in file_desc.message_types_by_name.items():
        module[name] = _message_class(desc, module_name, "")
