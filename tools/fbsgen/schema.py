# SPDX-License-Identifier: Apache-2.0
"""Parse the subset of the FlatBuffers schema language that Ferry uses into a model.

Anything outside the subset is an error with the file and line, so that the generated C
never silently disagrees with what flatc understands. The model also computes struct
layouts with FlatBuffers' rules (each field aligned to its size, the struct padded to its
largest alignment); bfbs.py then checks every figure against flatc's own parse.
"""

import os
import re


class SchemaError(Exception):
    pass


class Scalar:
    def __init__(self, key, size, ctype, base_type, lo, hi, is_float=False, cpp=None):
        self.key = key              # 'u32', 'f64', 'bool' ...: load/store suffix in fb.h
        self.size = size            # bytes
        self.ctype = ctype          # C type
        self.base_type = base_type  # reflection.BaseType number
        self.lo, self.hi = lo, hi   # value range (floats: None)
        self.is_float = is_float
        self.cpp = cpp or ctype     # C++ type


_INT = [('i8', 1, 'int8_t', 3, True), ('u8', 1, 'uint8_t', 4, False),
        ('i16', 2, 'int16_t', 5, True), ('u16', 2, 'uint16_t', 6, False),
        ('i32', 4, 'int32_t', 7, True), ('u32', 4, 'uint32_t', 8, False),
        ('i64', 8, 'int64_t', 9, True), ('u64', 8, 'uint64_t', 10, False)]
SCALAR_KEYS = {}
for _key, _size, _ctype, _bt, _signed in _INT:
    _bits = 8 * _size
    SCALAR_KEYS[_key] = Scalar(_key, _size, _ctype, _bt,
                               -(1 << (_bits - 1)) if _signed else 0,
                               (1 << (_bits - 1)) - 1 if _signed else (1 << _bits) - 1)
SCALAR_KEYS['bool'] = Scalar('bool', 1, 'bool', 2, 0, 1)
SCALAR_KEYS['f32'] = Scalar('f32', 4, 'float', 11, None, None, True)
SCALAR_KEYS['f64'] = Scalar('f64', 8, 'double', 12, None, None, True)

SCALAR_NAMES = {
    'bool': 'bool', 'byte': 'i8', 'int8': 'i8', 'ubyte': 'u8', 'uint8': 'u8',
    'short': 'i16', 'int16': 'i16', 'ushort': 'u16', 'uint16': 'u16',
    'int': 'i32', 'int32': 'i32', 'uint': 'u32', 'uint32': 'u32',
    'long': 'i64', 'int64': 'i64', 'ulong': 'u64', 'uint64': 'u64',
    'float': 'f32', 'float32': 'f32', 'double': 'f64', 'float64': 'f64',
}

# Names that would not compile as C or C++ identifiers (flatc renames some of them in C++,
# which would make the interop code disagree) are refused.
KEYWORDS = set('''
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t
class compl const constexpr const_cast continue decltype default delete do double
dynamic_cast else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast restrict return short signed sizeof static static_assert static_cast
struct switch template this thread_local throw true try typedef typeid typename union unsigned
using virtual void volatile wchar_t while xor xor_eq _Bool _Complex _Imaginary
'''.split())

# Attributes flatc knows that change the wire format or code generation in ways fbsgen does
# not implement.
UNSUPPORTED_ATTRIBUTES = {
    'id', 'key', 'hash', 'nested_flatbuffer', 'flexbuffer', 'force_align', 'bit_flags',
    'original_order', 'shared', 'native_inline', 'native_type', 'native_default',
    'native_custom_alloc', 'cpp_type', 'cpp_ptr_type', 'cpp_str_type', 'streaming', 'idempotent',
}


class Type:
    """kind: scalar, enum, struct, table, string, vector, array."""

    def __init__(self, kind, scalar=None, ref=None, elem=None, length=0):
        self.kind = kind
        self.scalar = scalar    # Scalar, for scalar and enum (the underlying type)
        self.ref = ref          # Enum, Struct or Table
        self.elem = elem        # element Type of vectors and arrays
        self.length = length    # array length

    @property
    def inline_size(self):
        if self.kind in ('scalar', 'enum'):
            return self.scalar.size
        if self.kind == 'struct':
            return self.ref.size
        if self.kind == 'array':
            return self.elem.inline_size * self.length
        return 4    # offset

    @property
    def inline_align(self):
        if self.kind in ('scalar', 'enum'):
            return self.scalar.size
        if self.kind == 'struct':
            return self.ref.align
        if self.kind == 'array':
            return self.elem.inline_align
        return 4


class Decl:
    def __init__(self, kind, name, namespace, path, line, attrs, doc):
        self.kind = kind            # 'enum', 'struct', 'table'
        self.name = name            # schema name
        self.namespace = namespace  # 'ferry.wire'
        self.path = path            # declaring file
        self.line = line
        self.attrs = attrs          # {name: value or None}
        self.doc = doc              # doc comment lines
        self.cname = None           # snake-case C name (set by the model)

    @property
    def full_name(self):
        return self.namespace + '.' + self.name if self.namespace else self.name


class EnumVal:
    def __init__(self, name, value, doc):
        self.name, self.value, self.doc = name, value, doc


class Enum(Decl):
    def __init__(self, *args):
        super().__init__('enum', *args)
        self.underlying = None      # Scalar
        self.values = []            # [EnumVal]

    def value_named(self, name):
        for v in self.values:
            if v.name == name:
                return v
        return None


class Field:
    def __init__(self, name, type_ref, default, attrs, doc, line):
        self.name = name
        self.type_ref = type_ref    # parsed type text, resolved into .type
        self.type = None
        self.default_text = default  # literal text or None
        self.default = 0            # resolved default (int or float)
        self.attrs = attrs
        self.doc = doc
        self.line = line
        self.id = 0                 # table field id (declaration order)
        self.offset = 0             # struct field byte offset
        self.required = 'required' in attrs
        self.deprecated = 'deprecated' in attrs


class Struct(Decl):
    def __init__(self, *args):
        super().__init__('struct', *args)
        self.fields = []
        self.size = 0
        self.align = 1
        self.c_type = None          # existing C type (attribute c_type) or None


class Table(Decl):
    def __init__(self, *args):
        super().__init__('table', *args)
        self.fields = []


def snake(name):
    s = re.sub(r'([A-Z]+)([A-Z][a-z])', r'\1_\2', name)
    s = re.sub(r'([a-z0-9])([A-Z])', r'\1_\2', s)
    return s.lower()


_TOKEN = re.compile(r'''
    (?P<ws>\s+)
  | (?P<doc>///[^\n]*)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<punct>[{}()\[\]:;=,])
''', re.S | re.X)


def tokenize(text, path):
    tokens, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SchemaError('%s:%d: unexpected character %r' % (path, line, text[pos]))
        kind, value = m.lastgroup, m.group()
        if kind == 'doc':
            tokens.append(('doc', value[3:].strip(), line))
        elif kind not in ('ws', 'comment'):
            tokens.append((kind, value, line))
        line += value.count('\n')
        pos = m.end()
    tokens.append(('eof', '', line))
    return tokens


class Parser:
    """One file. Declarations go into the shared Schema."""

    def __init__(self, schema, path):
        self.schema, self.path = schema, path
        with open(path, encoding='utf-8') as f:
            self.tokens = tokenize(f.read(), path)
        self.i = 0
        self.namespace = ''

    def error(self, msg, line=None):
        if line is None:
            line = self.tokens[self.i][2]
        raise SchemaError('%s:%d: %s' % (self.path, line, msg))

    def docs(self):
        lines = []
        while self.tokens[self.i][0] == 'doc':
            lines.append(self.tokens[self.i][1])
            self.i += 1
        return lines

    def peek(self):
        return self.tokens[self.i]

    def next(self):
        tok = self.tokens[self.i]
        if tok[0] == 'doc':
            self.error('doc comment (///) in an unexpected place')
        self.i += 1
        return tok

    def expect(self, kind, value=None):
        tok = self.next()
        if tok[0] != kind or (value is not None and tok[1] != value):
            self.error('expected %s, found %r' % (value or kind, tok[1]), tok[2])
        return tok[1]

    def accept(self, value):
        if self.peek()[0] == 'punct' and self.peek()[1] == value:
            self.i += 1
            return True
        return False

    def parse(self):
        while True:
            doc = self.docs()
            kind, value, line = self.next()
            if kind == 'eof':
                return
            if kind != 'ident':
                self.error('unexpected %r' % value, line)
            handler = getattr(self, 'parse_' + value, None)
            if value in ('union', 'rpc_service', 'file_identifier', 'file_extension'):
                self.error("'%s' is not supported by fbsgen" % value, line)
            if not handler:
                self.error('unexpected %r' % value, line)
            handler(doc, line)

    def parse_include(self, doc, line):
        name = self.expect('string')[1:-1]
        self.expect('punct', ';')
        self.schema.include(name, os.path.dirname(self.path), self.path, line)

    def parse_namespace(self, doc, line):
        self.namespace = self.expect('ident')
        self.expect('punct', ';')

    def parse_attribute(self, doc, line):
        tok = self.next()
        if tok[0] not in ('string', 'ident'):
            self.error('expected an attribute name', tok[2])
        self.schema.declared_attributes.add(tok[1].strip('"'))
        self.expect('punct', ';')

    def parse_root_type(self, doc, line):
        # Ferry frames say which table a payload holds; the root type changes nothing.
        self.expect('ident')
        self.expect('punct', ';')

    def attributes(self):
        attrs = {}
        if not self.accept('('):
            return attrs
        while True:
            kind, name, line = self.next()
            if kind != 'ident':
                self.error('expected an attribute name', line)
            if name in UNSUPPORTED_ATTRIBUTES:
                self.error("attribute '%s' is not supported by fbsgen" % name, line)
            value = None
            if self.accept(':'):
                value = self.next()[1]
                if value.startswith('"'):
                    value = value[1:-1]
            attrs[name] = value
            if self.accept(')'):
                return attrs
            self.expect('punct', ',')

    def parse_enum(self, doc, line):
        e = Enum(self.expect('ident'), self.namespace, self.path, line, {}, doc)
        self.expect('punct', ':')
        under = self.expect('ident')
        if under not in SCALAR_NAMES or SCALAR_NAMES[under] in ('bool', 'f32', 'f64'):
            self.error('enum %s: underlying type must be an integer type' % e.name, line)
        e.underlying = SCALAR_KEYS[SCALAR_NAMES[under]]
        e.attrs = self.attributes()
        self.expect('punct', '{')
        nxt = 0
        while not self.accept('}'):
            vdoc = self.docs()
            vline = self.peek()[2]
            name = self.expect('ident')
            if self.accept('='):
                nxt = parse_int(self.expect('number'), self, vline)
            if e.values and nxt <= e.values[-1].value:
                self.error('enum %s: values must ascend' % e.name, vline)
            if not e.underlying.lo <= nxt <= e.underlying.hi:
                self.error('enum %s: %s out of range' % (e.name, name), vline)
            e.values.append(EnumVal(name, nxt, vdoc))
            nxt += 1
            if not self.accept(','):
                self.expect('punct', '}')
                break
        if not e.values:
            self.error('enum %s has no values' % e.name, line)
        self.schema.add(e)

    def parse_struct(self, doc, line):
        self.parse_compound(Struct, doc, line)

    def parse_table(self, doc, line):
        self.parse_compound(Table, doc, line)

    def parse_compound(self, cls, doc, line):
        d = cls(self.expect('ident'), self.namespace, self.path, line, {}, doc)
        d.attrs = self.attributes()
        self.expect('punct', '{')
        while not self.accept('}'):
            fdoc = self.docs()
            fline = self.peek()[2]
            name = self.expect('ident')
            self.expect('punct', ':')
            type_ref = self.type_ref()
            default = None
            if self.accept('='):
                kind, default, _ = self.next()
                if kind not in ('number', 'ident'):
                    self.error('field %s: bad default %r' % (name, default), fline)
            attrs = self.attributes()
            self.expect('punct', ';')
            d.fields.append(Field(name, type_ref, default, attrs, fdoc, fline))
        self.schema.add(d)

    def type_ref(self):
        """'name', ('vector', inner) or ('array', inner, length)."""
        if self.accept('['):
            inner = self.type_ref()
            if self.accept(':'):
                length = parse_int(self.expect('number'), self, self.peek()[2])
                self.expect('punct', ']')
                return ('array', inner, length)
            self.expect('punct', ']')
            return ('vector', inner)
        return (self.expect('ident'), self.namespace, self.path, self.peek()[2])


def parse_int(text, parser, line):
    try:
        return int(text, 0)
    except ValueError:
        parser.error('expected an integer, found %r' % text, line)
    return 0


class Schema:
    def __init__(self, include_dirs):
        self.include_dirs = include_dirs
        self.files = []             # parsed files, in order
        self.decls = {}             # full name -> Decl
        self.order = []             # declarations in parse order
        self.declared_attributes = set()

    def parse_file(self, path):
        real = os.path.realpath(path)
        if real in self.files:
            return
        self.files.append(real)
        Parser(self, real).parse()

    def include(self, name, here, by, line):
        for d in [here] + self.include_dirs:
            candidate = os.path.join(d, name)
            if os.path.exists(candidate):
                return self.parse_file(candidate)
        raise SchemaError('%s:%d: cannot find include %r' % (by, line, name))

    def add(self, decl):
        if decl.full_name in self.decls:
            raise SchemaError('%s:%d: %s declared twice' % (decl.path, decl.line, decl.name))
        self.decls[decl.full_name] = decl
        self.order.append(decl)

    def lookup(self, name, namespace, path, line):
        """Resolve like flatc: the innermost enclosing namespace first, then outwards."""
        parts = namespace.split('.') if namespace else []
        for n in range(len(parts), -1, -1):
            full = '.'.join(parts[:n] + [name])
            if full in self.decls:
                return self.decls[full]
        raise SchemaError('%s:%d: unknown type %r' % (path, line, name))

    @property
    def enums(self):
        return [d for d in self.order if d.kind == 'enum']

    @property
    def structs(self):
        return [d for d in self.order if d.kind == 'struct']

    @property
    def tables(self):
        return [d for d in self.order if d.kind == 'table']


# ---- resolution and checks ----

DECL_ATTRIBUTES = {'enum': {'c_name'}, 'struct': {'c_name', 'c_type', 'framed_struct'},
                   'table': {'c_name'}}
FIELD_ATTRIBUTES = {'struct': set(), 'table': {'required', 'deprecated'}}
IDENT = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def fail(decl, msg, line=None):
    raise SchemaError('%s:%d: %s' % (decl.path, line or decl.line, msg))


def check_attributes(schema, decl, attrs, allowed, line, what):
    for name in attrs:
        if name in allowed:
            continue
        if name in ('c_name', 'c_type', 'required', 'deprecated', 'framed_struct'):
            fail(decl, "attribute '%s' is not allowed on %s" % (name, what), line)
        if name not in schema.declared_attributes:
            fail(decl, "unknown attribute '%s'" % name, line)


def resolve_type(schema, decl, field):
    def resolve(ref, depth):
        if ref[0] == 'vector':
            if depth:
                fail(decl, 'field %s: vectors of vectors are not supported' % field.name,
                     field.line)
            return Type('vector', elem=resolve(ref[1], depth + 1))
        if ref[0] == 'array':
            return Type('array', elem=resolve(ref[1], depth + 1), length=ref[2])
        name, namespace, path, line = ref
        if name in SCALAR_NAMES:
            return Type('scalar', scalar=SCALAR_KEYS[SCALAR_NAMES[name]])
        if name == 'string':
            return Type('string')
        target = schema.lookup(name, namespace, path, line)
        if target.kind == 'enum':
            return Type('enum', scalar=target.underlying, ref=target)
        return Type(target.kind, ref=target)

    return resolve(field.type_ref, 0)


def check_struct_field(decl, f):
    t = f.type
    if t.kind == 'array':
        if t.elem.kind != 'scalar' or t.elem.scalar.key == 'bool':
            fail(decl, 'field %s: arrays hold integer or float scalars only' % f.name, f.line)
        if not 0 < t.length <= 65535:
            fail(decl, 'field %s: bad array length' % f.name, f.line)
    elif t.kind not in ('scalar', 'enum', 'struct'):
        fail(decl, 'field %s: a struct holds scalars, enums, structs and arrays only' % f.name,
             f.line)
    if f.default_text is not None:
        fail(decl, 'field %s: struct fields have no defaults' % f.name, f.line)


def check_table_field(decl, f):
    t = f.type
    if t.kind == 'array':
        fail(decl, 'field %s: fixed-size arrays are only allowed in structs' % f.name, f.line)
    if t.kind == 'vector' and t.elem.kind == 'array':
        fail(decl, 'field %s: vectors of arrays are not supported' % f.name, f.line)
    if f.required and t.kind in ('scalar', 'enum'):
        fail(decl, 'field %s: only non-scalar fields can be required' % f.name, f.line)
    if f.default_text is not None and t.kind not in ('scalar', 'enum'):
        fail(decl, 'field %s: only scalar fields have defaults' % f.name, f.line)
    f.default = resolve_default(decl, f)


def resolve_default(decl, f):
    t, text = f.type, f.default_text
    if t.kind not in ('scalar', 'enum'):
        return 0
    if t.kind == 'enum':
        e = t.ref
        if text is None:
            value = 0
        elif e.value_named(text):
            value = e.value_named(text).value
        else:
            value = int_default(decl, f, text)
        if not any(v.value == value for v in e.values):
            fail(decl, 'field %s: default %s is not a value of %s' % (f.name, value, e.name),
                 f.line)
        return value
    s = t.scalar
    if text is None:
        return 0.0 if s.is_float else 0
    if s.key == 'bool':
        if text in ('true', 'false'):
            return int(text == 'true')
        value = int_default(decl, f, text)
        if value not in (0, 1):
            fail(decl, 'field %s: bad bool default' % f.name, f.line)
        return value
    if s.is_float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or value != value or value in (float('inf'), float('-inf')):
            fail(decl, 'field %s: float defaults must be finite numbers' % f.name, f.line)
        return value
    value = int_default(decl, f, text)
    if not s.lo <= value <= s.hi:
        fail(decl, 'field %s: default out of range' % f.name, f.line)
    return value


def int_default(decl, f, text):
    try:
        return int(text, 0)
    except ValueError:
        fail(decl, 'field %s: bad default %r' % (f.name, text), f.line)
    return 0


def layout_struct(decl, visiting):
    if decl.size:
        return
    if decl in visiting:
        fail(decl, 'struct %s contains itself' % decl.name)
    visiting.add(decl)
    offset, align = 0, 1
    for f in decl.fields:
        if f.type.kind == 'struct':
            layout_struct(f.type.ref, visiting)
        a = f.type.inline_align
        offset = (offset + a - 1) // a * a
        f.offset = offset
        offset += f.type.inline_size
        align = max(align, a)
    decl.size = (offset + align - 1) // align * align
    decl.align = align
    visiting.discard(decl)


def check_required_cycles(table, path):
    for f in table.fields:
        if f.required and not f.deprecated and f.type.kind == 'table':
            if f.type.ref in path:
                fail(table, 'required table fields form a cycle through %s' % f.name, f.line)
            check_required_cycles(f.type.ref, path + [f.type.ref])


def resolve(schema):
    """Resolve types, defaults, layouts and C names; refuse what fbsgen cannot handle."""
    cnames = {}
    for d in schema.order:
        check_attributes(schema, d, d.attrs, DECL_ATTRIBUTES[d.kind], d.line, d.kind + 's')
        d.cname = d.attrs.get('c_name') or snake(d.name)
        if not IDENT.match(d.cname):
            fail(d, 'bad C name %r' % d.cname)
        if d.cname in cnames:
            fail(d, 'C name %s also used by %s' % (d.cname, cnames[d.cname].full_name))
        cnames[d.cname] = d
        if d.kind == 'struct':
            d.c_type = d.attrs.get('c_type')
            if d.c_type is not None and not IDENT.match(d.c_type):
                fail(d, 'bad c_type %r' % d.c_type)
            if not d.fields:
                fail(d, 'struct %s is empty' % d.name)
        if d.kind == 'enum':
            for v in d.values:
                if not IDENT.match(v.name):
                    fail(d, 'bad enum value name %r' % v.name)
            continue
        names = set()
        for i, f in enumerate(d.fields):
            if not IDENT.match(f.name) or f.name in KEYWORDS:
                fail(d, 'field name %r is not usable in C and C++' % f.name, f.line)
            if f.name in names:
                fail(d, 'field %s declared twice' % f.name, f.line)
            names.add(f.name)
            check_attributes(schema, d, f.attrs, FIELD_ATTRIBUTES[d.kind], f.line,
                             d.kind + ' fields')
            f.id = i
            f.type = resolve_type(schema, d, f)
            if d.kind == 'struct':
                check_struct_field(d, f)
            else:
                check_table_field(d, f)
    for s in schema.structs:
        layout_struct(s, set())
    for t in schema.tables:
        check_required_cycles(t, [t])
    check_message_type(schema)


def message_enum(schema):
    for e in schema.enums:
        if e.name == 'MessageType':
            return e
    return None


def check_message_type(schema):
    """MessageType: each value names what it frames, so the dispatch cannot drift. That is a
    table (the payload is a FlatBuffer of it), or a struct marked (framed_struct): a
    struct-framed message, whose payload is the struct's fixed little-endian bytes followed by
    raw bytes (bulk data that is not worth a FlatBuffer: the TCP engine's DataChunk). A
    framed_struct that no MessageType names is refused too: it would be dead wire format."""
    e = message_enum(schema)
    schema.messages = []
    framed = [s for s in schema.structs if 'framed_struct' in s.attrs]
    if not e:
        if framed:
            fail(framed[0], 'struct %s is marked framed_struct but there is no MessageType'
                 % framed[0].name)
        return
    if e.underlying.key != 'u16':
        fail(e, 'MessageType must be a uint16 enum (the frame header field)')
    named = set()
    for v in e.values:
        if v.value == 0:
            fail(e, 'MessageType value 0 is reserved (%s)' % v.name)
        try:
            decl = schema.lookup(v.name, e.namespace, e.path, e.line)
        except SchemaError:
            decl = None
        if decl is not None and decl.kind == 'struct':
            if 'framed_struct' not in decl.attrs:
                fail(e, 'MessageType %s names struct %s, which is not marked (framed_struct)'
                     % (v.name, decl.name))
            if decl.attrs['framed_struct'] is not None:
                fail(decl, 'framed_struct takes no value')
            named.add(decl)
        elif decl is None or decl.kind != 'table':
            fail(e, 'MessageType %s does not name a table or a framed_struct' % v.name)
        schema.messages.append((v, decl))
    for s in framed:
        if s not in named:
            fail(s, 'struct %s is marked framed_struct but no MessageType names it' % s.name)
