# SPDX-License-Identifier: Apache-2.0
"""Check fbsgen's model of the schemas against flatc's own parse of them.

flatc writes a binary schema (.bfbs, itself a FlatBuffer of flatc's reflection.fbs) with
every type, field id, vtable offset, struct layout, default and enum value as flatc
understands them. Any disagreement with fbsgen's model fails the build, so the C codec can
never drift from the format flatc-generated code reads and writes.
"""

import struct

from schema import SchemaError

# reflection.fbs BaseType
BT_STRING, BT_VECTOR, BT_OBJ, BT_UNION, BT_ARRAY = 13, 14, 15, 16, 17


class Reader:
    """Just enough of a FlatBuffers reader for reflection data (trusted: flatc wrote it)."""

    def __init__(self, data):
        self.data = data

    def scalar(self, fmt, pos):
        return struct.unpack_from('<' + fmt, self.data, pos)[0]

    def field(self, table, fid):
        vtable = table - self.scalar('i', table)
        slot = 4 + 2 * fid
        if slot + 2 > self.scalar('H', vtable):
            return 0
        off = self.scalar('H', vtable + slot)
        return table + off if off else 0

    def get(self, table, fid, fmt, default=0):
        p = self.field(table, fid)
        return self.scalar(fmt, p) if p else default

    def deref(self, pos):
        return pos + self.scalar('I', pos)

    def string(self, table, fid):
        p = self.field(table, fid)
        if not p:
            return None
        s = self.deref(p)
        return self.data[s + 4:s + 4 + self.scalar('I', s)].decode('utf-8')

    def table(self, table, fid):
        p = self.field(table, fid)
        return self.deref(p) if p else None

    def tables(self, table, fid):
        p = self.field(table, fid)
        if not p:
            return []
        v = self.deref(p)
        return [self.deref(v + 4 + 4 * i) for i in range(self.scalar('I', v))]


def load(path):
    with open(path, 'rb') as f:
        r = Reader(f.read())
    root = r.deref(0)
    objects, enums = {}, {}
    object_list = r.tables(root, 0)
    enum_list = r.tables(root, 1)
    object_names = [r.string(o, 0) for o in object_list]
    enum_names = [r.string(e, 0) for e in enum_list]

    def type_info(t):
        base, elem, index = r.get(t, 0, 'b'), r.get(t, 1, 'b'), r.get(t, 2, 'i', -1)
        ref = None
        if base in (BT_OBJ,) or (base in (BT_VECTOR, BT_ARRAY) and elem == BT_OBJ):
            ref = object_names[index]
        elif index >= 0:
            ref = enum_names[index]
        return (base, elem, ref, r.get(t, 3, 'H'))

    for o, name in zip(object_list, object_names):
        fields = {}
        for f in r.tables(o, 1):
            fields[r.string(f, 0)] = {
                'type': type_info(r.table(f, 1)), 'id': r.get(f, 2, 'H'),
                'offset': r.get(f, 3, 'H'), 'default_integer': r.get(f, 4, 'q'),
                'default_real': r.get(f, 5, 'd', 0.0), 'deprecated': bool(r.get(f, 6, 'B')),
                'required': bool(r.get(f, 7, 'B')),
            }
        objects[name] = {'is_struct': bool(r.get(o, 2, 'B')), 'minalign': r.get(o, 3, 'i'),
                         'bytesize': r.get(o, 4, 'i'), 'fields': fields}
    for e, name in zip(enum_list, enum_names):
        values = [(r.string(v, 0), r.get(v, 1, 'q')) for v in r.tables(e, 1)]
        enums[name] = {'is_union': bool(r.get(e, 2, 'B')),
                       'underlying': type_info(r.table(e, 3))[0], 'values': values}
    return objects, enums


def expected_type(t):
    """(base_type, element, referenced name, fixed_length) as flatc's reflection has it."""
    def base(x):
        if x.kind in ('scalar', 'enum'):
            return x.scalar.base_type
        if x.kind == 'string':
            return BT_STRING
        return BT_OBJ

    def ref(x):
        return x.ref.full_name if x.kind in ('enum', 'struct', 'table') else None

    if t.kind == 'vector':
        return (BT_VECTOR, base(t.elem), ref(t.elem), 0)
    if t.kind == 'array':
        return (BT_ARRAY, base(t.elem), ref(t.elem), t.length)
    return (base(t), 0, ref(t), 0)


def as_int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def check(schema, paths):
    objects, enums = {}, {}
    for p in paths:
        o, e = load(p)
        objects.update(o)
        enums.update(e)
    errors = []

    def differ(what, ours, flatc):
        errors.append('%s: fbsgen has %r, flatc has %r' % (what, ours, flatc))

    ours_names = {d.full_name for d in schema.order}
    for name in sorted(set(objects) | set(enums)):
        if name not in ours_names:
            errors.append('%s: known to flatc, missing in fbsgen' % name)
    for d in schema.order:
        if d.kind == 'enum':
            check_enum(d, enums.get(d.full_name), differ, errors)
        else:
            check_object(d, objects.get(d.full_name), differ, errors)
    if errors:
        raise SchemaError('fbsgen and flatc disagree about the schema:\n  ' +
                          '\n  '.join(errors))


def check_enum(d, theirs, differ, errors):
    if theirs is None:
        errors.append('%s: not known to flatc' % d.full_name)
        return
    ours = sorted((v.name, as_int64(v.value)) for v in d.values)   # reflection: int64
    if ours != sorted(theirs['values']):
        differ(d.full_name + ' values', ours, theirs['values'])
    if d.underlying.base_type != theirs['underlying']:
        differ(d.full_name + ' underlying type', d.underlying.base_type, theirs['underlying'])


def check_object(d, theirs, differ, errors):
    name = d.full_name
    if theirs is None:
        errors.append('%s: not known to flatc' % name)
        return
    if theirs['is_struct'] != (d.kind == 'struct'):
        differ(name + ' kind', d.kind, 'struct' if theirs['is_struct'] else 'table')
        return
    if d.kind == 'struct':
        if (d.size, d.align) != (theirs['bytesize'], theirs['minalign']):
            differ(name + ' size/alignment', (d.size, d.align),
                   (theirs['bytesize'], theirs['minalign']))
    if sorted(f.name for f in d.fields) != sorted(theirs['fields']):
        differ(name + ' fields', sorted(f.name for f in d.fields), sorted(theirs['fields']))
        return
    for f in d.fields:
        t = theirs['fields'][f.name]
        what = '%s.%s' % (name, f.name)
        if expected_type(f.type) != t['type']:
            differ(what + ' type', expected_type(f.type), t['type'])
        offset = f.offset if d.kind == 'struct' else 4 + 2 * f.id
        if d.kind == 'table' and f.id != t['id']:
            differ(what + ' id', f.id, t['id'])
        if offset != t['offset']:
            differ(what + ' offset', offset, t['offset'])
        if (f.required, f.deprecated) != (t['required'], t['deprecated']):
            differ(what + ' required/deprecated', (f.required, f.deprecated),
                   (t['required'], t['deprecated']))
        if d.kind == 'table' and f.type.kind in ('scalar', 'enum'):
            if f.type.kind == 'scalar' and f.type.scalar.is_float:
                if f.default != t['default_real']:
                    differ(what + ' default', f.default, t['default_real'])
            elif as_int64(f.default) != t['default_integer']:
                # flatc 2.0's reflection records 0 for uint64 defaults past INT64_MAX (its
                # C++ output has the right value); accept exactly that case.
                if not (f.default > (1 << 63) - 1 and t['default_integer'] == 0):
                    differ(what + ' default', f.default, t['default_integer'])
