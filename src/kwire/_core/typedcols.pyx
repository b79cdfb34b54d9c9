# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The column tree of a typed decoder's Arrow type (:class:`Columns`, its
appenders in typedcols.pxd), and its memory lent to Arrow (:class:`Block`)."""

from cpython.buffer cimport PyBUF_WRITABLE
from libc.stdlib cimport calloc, free
from libc.string cimport memset

from kwire._core.buffers cimport GBuf, gbuf_reserve, put_bit, put_i32

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - exercised only without pyarrow
    raise ImportError("kwire's typed formats need pyarrow: pip install 'kwire[arrow]'") from e

from kwire.errors import KwireError

__all__ = ["Columns", "column_kind"]

cdef char _EMPTY[8]


cdef class Block:
    """Memory of one finished column buffer, owned until Arrow lets it go."""
    cdef char* data
    cdef Py_ssize_t size
    cdef Py_ssize_t shape[1]

    def __dealloc__(self):
        free(self.data)

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.data if self.data != NULL else _EMPTY
        view.obj = self
        view.len = self.size
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        self.shape[0] = self.size
        view.shape = self.shape
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef int col_mark_bitmap(Col* c, bint valid) noexcept nogil:
    """:c:func:`col_mark` of a null, or of any row once a column has one."""
    cdef Py_ssize_t nbytes
    if c.nulls == 0:               # the first null: a bitmap of the rows before it, all valid
        nbytes = (c.length >> 3) + 1
        if gbuf_reserve(&c.valid, nbytes) < 0:
            col_fail(c, TC_NOMEM)
            return -1
        memset(c.valid.data, 0xFF, nbytes)
        c.valid.len = nbytes
    if put_bit(&c.valid, c.length, valid) < 0:
        col_fail(c, TC_NOMEM)
        return -1
    if not valid:
        c.nulls += 1
    c.length += 1
    return 0


cdef void col_blank(Col* c) noexcept nogil:
    cdef int i
    if c.kind == TC_FIXED or c.kind == TC_DICT:
        if gbuf_reserve(&c.data, c.width) < 0:
            col_fail(c, TC_NOMEM)
            return
        memset(c.data.data + c.data.len, 0, c.width)
        c.data.len += c.width
    elif c.kind == TC_BOOL:
        if put_bit(&c.data, c.length, False) < 0:
            col_fail(c, TC_NOMEM)
    elif c.kind == TC_BINARY:
        col_offset(c, c.data.len)
    elif c.kind == TC_LIST or c.kind == TC_MAP:
        col_offset(c, c.child[0].length)
    elif c.kind == TC_STRUCT:
        for i in range(c.nchild):
            if c.child[i].nullable:
                col_null(&c.child[i])
            else:
                col_placeholder(&c.child[i])


cdef void col_placeholder(Col* c) noexcept nogil:
    col_blank(c)
    col_mark(c, c.kind != TC_NULL)


cdef object take(GBuf* g):
    """``g``'s memory as a pyarrow buffer (no copy); ``g`` is left empty."""
    cdef Block b = Block.__new__(Block)
    b.data = g.data
    b.size = g.len
    g.data = NULL
    g.len = 0
    g.cap = 0
    return pa.py_buffer(b)


def column_kind(t) -> int:
    """The :c:type:`ColKind` of a pyarrow type (extension types: their
    storage's), or ``TypeError`` for one no typed decoder builds."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_null(t):
        return TC_NULL
    if pa.types.is_boolean(t):
        return TC_BOOL
    if pa.types.is_dictionary(t):
        if not pa.types.is_int32(t.index_type):
            raise TypeError(f"dictionary indices must be int32, not {t.index_type}")
        return TC_DICT
    if pa.types.is_binary(t) or pa.types.is_string(t):
        return TC_BINARY
    if pa.types.is_map(t):
        return TC_MAP
    if pa.types.is_list(t):
        return TC_LIST
    if pa.types.is_struct(t):
        return TC_STRUCT
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        return TC_FIXED
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)) and t.bit_width % 8 == 0:
        return TC_FIXED
    raise TypeError(f"no typed column of Arrow type {t}")


def _children(t) -> list:
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_map(t):
        return [pa.struct([pa.field("key", t.key_type, nullable=False), t.item_field])]
    if pa.types.is_list(t):
        return [t.value_type]
    if pa.types.is_struct(t):
        return [t.field(i).type for i in range(t.num_fields)]
    return []


def _children_nullable(t) -> list:
    """Whether each child of ``t`` (as :func:`_children` lists them) may hold nulls."""
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_map(t):
        return [False]
    if pa.types.is_list(t):
        return [t.value_field.nullable]
    if pa.types.is_struct(t):
        return [t.field(i).nullable for i in range(t.num_fields)]
    return []


def _width(t) -> int:
    if isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        return t.byte_width
    if pa.types.is_dictionary(t):
        return 4
    return t.bit_width // 8


cdef int col_init(Col* c, object t, int* err, list types, bint nullable=True) except -1:
    """``c`` (zeroed) as the column of ``t``; its children too (pre-order in ``types``)."""
    cdef list kids = _children(t)
    cdef list kids_nullable = _children_nullable(t)
    cdef int i
    c.nullable = nullable
    c.kind = column_kind(t)
    c.width = _width(t) if c.kind in (TC_FIXED, TC_DICT) else 0
    c.err = err
    types.append(t)
    if c.kind in (TC_BINARY, TC_LIST, TC_MAP):
        col_start_offsets(c)
    if kids:
        c.child = <Col*>calloc(len(kids), sizeof(Col))
        if c.child == NULL:
            raise MemoryError()
        c.nchild = len(kids)
        for i in range(c.nchild):
            col_init(&c.child[i], kids[i], err, types, kids_nullable[i])
    return 0


cdef int col_start_offsets(Col* c) except -1:
    if gbuf_reserve(&c.offs, 4) < 0:
        raise MemoryError()
    put_i32(&c.offs, 0)
    return 0


cdef void col_free(Col* c) noexcept:
    cdef int i
    free(c.valid.data)
    free(c.offs.data)
    free(c.data.data)
    memset(&c.valid, 0, sizeof(GBuf))
    memset(&c.offs, 0, sizeof(GBuf))
    memset(&c.data, 0, sizeof(GBuf))
    if c.child != NULL:
        for i in range(c.nchild):
            col_free(&c.child[i])
        free(c.child)
        c.child = NULL


cdef int col_clear(Col* c) except -1:
    """``c`` and its children empty (their memory kept, for the next rows)."""
    cdef int i
    c.length = 0
    c.nulls = 0
    c.valid.len = 0
    c.data.len = 0
    c.offs.len = 0
    # memory of the size the last rows reached, at once (growing to it copies it, page by page)
    if gbuf_reserve(&c.data, c.hint[2]) < 0 or gbuf_reserve(&c.offs, c.hint[1]) < 0:
        raise MemoryError()
    if c.kind in (TC_BINARY, TC_LIST, TC_MAP):
        col_start_offsets(c)
    for i in range(c.nchild):
        col_clear(&c.child[i])
    return 0


cdef Col* col_find(Col* c, Py_ssize_t index, Py_ssize_t* seen) noexcept:
    cdef int i
    cdef Col* found
    if seen[0] == index:
        return c
    seen[0] += 1
    for i in range(c.nchild):
        found = col_find(&c.child[i], index, seen)
        if found != NULL:
            return found
    return NULL


cdef class Columns:
    def __cinit__(self, arrow_type, dictionaries=()):
        """Columns of ``arrow_type``; ``dictionaries``: the dictionary (a
        pyarrow array) of each dictionary column, in the order a pre-order
        walk of the type meets them."""
        self.arrow_type = arrow_type
        self.types = []
        self.root = <Col*>calloc(1, sizeof(Col))
        if self.root == NULL:
            raise MemoryError()
        col_init(self.root, arrow_type, &self.err, self.types)
        self.ncols = len(self.types)
        self.dictionaries = list(dictionaries)
        wanted = sum(1 for t in self.types if pa.types.is_dictionary(t))
        if wanted != len(self.dictionaries):
            raise ValueError(f"{wanted} dictionary columns, {len(self.dictionaries)} dictionaries given")

    def __dealloc__(self):
        if self.root != NULL:
            col_free(self.root)
            free(self.root)

    @property
    def length(self) -> int:
        """Rows appended since the last :meth:`finish`."""
        return self.root.length

    cdef int reset(self) except -1:
        """Forget every row appended since the last finish (a failed decode)."""
        self.err = TC_OK
        col_clear(self.root)
        return 0

    cdef Col* column(self, Py_ssize_t index) except NULL:
        """The column ``index`` (pre-order, as the types are numbered)."""
        if not 0 <= index < self.ncols:
            raise IndexError(f"no column {index} in {self.arrow_type}")
        cdef Py_ssize_t seen = 0
        return col_find(self.root, index, &seen)

    cpdef object finish(self):
        """The rows appended since the last finish, as one pyarrow array of
        the type; the columns start empty again."""
        if self.err == TC_NOMEM:
            self.reset()
            raise MemoryError("typed columns: out of memory")
        if self.err == TC_TOO_BIG:
            self.reset()
            raise KwireError("typed columns: one batch's column would pass 2 GiB; decode fewer rows at a time")
        cdef list at = [0, 0]          # next column, next dictionary (pre-order)
        out = self._finish(self.root, at)
        col_clear(self.root)
        return out

    cdef object _finish(self, Col* c, list at):
        cdef int i
        t = self.types[at[0]]
        at[0] += 1
        c.hint[0], c.hint[1], c.hint[2] = c.valid.len, c.offs.len, c.data.len
        validity = take(&c.valid) if c.nulls else None
        children = [self._finish(&c.child[i], at) for i in range(c.nchild)]
        storage = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
        if c.kind == TC_NULL:
            arr = pa.nulls(c.length)
        elif c.kind == TC_STRUCT:
            arr = pa.Array.from_buffers(storage, c.length, [validity], null_count=c.nulls, children=children)
        elif c.kind in (TC_LIST, TC_MAP):
            arr = pa.Array.from_buffers(storage, c.length, [validity, take(&c.offs)], null_count=c.nulls,
                                        children=children)
        elif c.kind == TC_BINARY:
            arr = pa.Array.from_buffers(storage, c.length, [validity, take(&c.offs), take(&c.data)],
                                        null_count=c.nulls)
        elif c.kind == TC_DICT:
            indices = pa.Array.from_buffers(pa.int32(), c.length, [validity, take(&c.data)], null_count=c.nulls)
            arr = pa.DictionaryArray.from_arrays(indices, self.dictionaries[at[1]])
            at[1] += 1
        else:       # TC_BOOL, TC_FIXED
            arr = pa.Array.from_buffers(storage, c.length, [validity, take(&c.data)], null_count=c.nulls)
        if isinstance(t, pa.BaseExtensionType):
            arr = pa.ExtensionArray.from_storage(t, arr)
        return arr
