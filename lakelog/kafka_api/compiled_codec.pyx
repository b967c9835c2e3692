# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The records of a Kafka v2 record batch (its uncompressed payload) to flat columns and back, compiled.

`record_codec.py` is the door: it picks this module, or `python_codec.py` (the same functions in pure
Python, the fallback when this one was not built), and turns the flat columns into Arrow arrays. Both take
and give the same shapes:

- decode_records(payload, count): (offset deltas int64, timestamp deltas int64, key offsets int32 (count + 1),
  key validity uint8, key bytes uint8, the same three for values, header offsets int32 (count + 1, into the
  headers), header key offsets int32, header key bytes, header value offsets, validity and bytes); raises
  ValueError on a malformed payload.
- encode_records(the same columns, where offsets may start anywhere in their bytes, the first record of each
  batch, the room to leave before each batch for its header): (a bytearray of the batches, their headers
  left to fill, each record's end in it, int64).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcpy

import numpy as np
from aiokafka.record.util import calc_crc32c as _crc32c_elsewhere

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <nmmintrin.h>
    __attribute__((target("sse4.2")))
    static uint32_t lakelog_crc32c_hw(const uint8_t *p, size_t n) {
        uint64_t crc = 0xFFFFFFFFu;
        uint32_t c;
        while (n >= 8) {
            uint64_t word;
            memcpy(&word, p, 8);
            crc = _mm_crc32_u64(crc, word);
            p += 8;
            n -= 8;
        }
        c = (uint32_t)crc;
        while (n--) c = _mm_crc32_u8(c, *p++);
        return ~c;
    }
    static int lakelog_crc32c_has_hw(void) { __builtin_cpu_init(); return __builtin_cpu_supports("sse4.2"); }
    #else
    static uint32_t lakelog_crc32c_hw(const uint8_t *p, size_t n) { (void)p; (void)n; return 0; }
    static int lakelog_crc32c_has_hw(void) { return 0; }
    #endif
    """
    uint32_t lakelog_crc32c_hw(const uint8_t* p, size_t n) nogil
    int lakelog_crc32c_has_hw()

HARDWARE_CRC32C = bool(lakelog_crc32c_has_hw())  # x86-64's SSE 4.2 instruction; elsewhere aiokafka's codec


def crc32c(const uint8_t[::1] data):
    """CRC-32C (Castagnoli) of `data`, as a v2 batch carries it."""
    if not HARDWARE_CRC32C:
        return _crc32c_elsewhere(bytes(data))
    # the GIL kept: a batch's CRC takes microseconds, and a thread that lets it go on the event loop waits for it
    # behind the writer threads (up to the 5 ms switch interval)
    return lakelog_crc32c_hw(&data[0] if data.shape[0] else NULL, data.shape[0])


cdef inline Py_ssize_t _read_varint(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, int64_t* out) except -1:
    """A zigzag varint (up to 64 bits) at `pos`, before `end`; the position after it."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos >= end:
            raise ValueError("a varint runs past the end of its record")
        b = buf[pos]
        pos += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 63:
            raise ValueError("a varint of more than 10 bytes")
    out[0] = <int64_t>(result >> 1) ^ -(<int64_t>(result & 1))
    return pos


cdef inline int _varint_size(int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


cdef inline Py_ssize_t _write_varint(uint8_t* out, Py_ssize_t pos, int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while v >= 0x80:
        out[pos] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        pos += 1
    out[pos] = <uint8_t>v
    return pos + 1


cdef struct _Columns:
    # where pass 2 writes (NULL in pass 1, which only counts)
    int64_t* offset_deltas
    int64_t* timestamp_deltas
    int32_t* key_offsets
    uint8_t* key_valid
    uint8_t* key_data
    int32_t* value_offsets
    uint8_t* value_valid
    uint8_t* value_data
    int32_t* header_offsets
    int32_t* hkey_offsets
    uint8_t* hkey_data
    int32_t* hval_offsets
    uint8_t* hval_valid
    uint8_t* hval_data
    # totals, counted by pass 1
    Py_ssize_t key_bytes
    Py_ssize_t value_bytes
    Py_ssize_t headers
    Py_ssize_t hkey_bytes
    Py_ssize_t hval_bytes


cdef int _scan(const uint8_t* buf, Py_ssize_t n, Py_ssize_t count, _Columns* c, bint fill) except -1:
    cdef Py_ssize_t pos = 0, end, i, j
    cdef Py_ssize_t kpos = 0, vpos = 0, hidx = 0, hkpos = 0, hvpos = 0
    cdef int64_t length, ts_delta, off_delta, klen, vlen, hcount, hklen, hvlen
    for i in range(count):
        pos = _read_varint(buf, pos, n, &length)
        if length < 0 or length > n - pos:
            raise ValueError(f"record {i}: length {length} with {n - pos} bytes left")
        end = pos + length
        if pos >= end:
            raise ValueError(f"record {i}: no attributes")
        pos += 1  # attributes, unused
        pos = _read_varint(buf, pos, end, &ts_delta)
        pos = _read_varint(buf, pos, end, &off_delta)
        pos = _read_varint(buf, pos, end, &klen)
        if klen >= 0:
            if klen > end - pos:
                raise ValueError(f"record {i}: key of {klen} bytes past the record's end")
            if fill:
                memcpy(c.key_data + kpos, buf + pos, klen)
                c.key_valid[i] = 1
            kpos += klen
            pos += klen
        elif fill:
            c.key_valid[i] = 0
        pos = _read_varint(buf, pos, end, &vlen)
        if vlen >= 0:
            if vlen > end - pos:
                raise ValueError(f"record {i}: value of {vlen} bytes past the record's end")
            if fill:
                memcpy(c.value_data + vpos, buf + pos, vlen)
                c.value_valid[i] = 1
            vpos += vlen
            pos += vlen
        elif fill:
            c.value_valid[i] = 0
        pos = _read_varint(buf, pos, end, &hcount)
        if hcount < 0 or hcount > end - pos:
            raise ValueError(f"record {i}: invalid number of headers {hcount}")
        for j in range(hcount):
            pos = _read_varint(buf, pos, end, &hklen)
            if hklen < 0 or hklen > end - pos:
                raise ValueError(f"record {i}: invalid header key size {hklen}")
            if fill:
                memcpy(c.hkey_data + hkpos, buf + pos, hklen)
            hkpos += hklen
            pos += hklen
            pos = _read_varint(buf, pos, end, &hvlen)
            if hvlen >= 0:
                if hvlen > end - pos:
                    raise ValueError(f"record {i}: header value of {hvlen} bytes past the record's end")
                if fill:
                    memcpy(c.hval_data + hvpos, buf + pos, hvlen)
                    c.hval_valid[hidx] = 1
                hvpos += hvlen
                pos += hvlen
            elif fill:
                c.hval_valid[hidx] = 0
            hidx += 1
            if fill:
                c.hkey_offsets[hidx] = <int32_t>hkpos
                c.hval_offsets[hidx] = <int32_t>hvpos
        if pos != end:
            raise ValueError(f"record {i}: expected to read {length} bytes, read {pos - (end - length)}")
        if fill:
            c.offset_deltas[i] = off_delta
            c.timestamp_deltas[i] = ts_delta
            c.key_offsets[i + 1] = <int32_t>kpos
            c.value_offsets[i + 1] = <int32_t>vpos
            c.header_offsets[i + 1] = <int32_t>hidx
    if pos != n:
        raise ValueError(f"{n - pos} unconsumed bytes after all records")
    c.key_bytes, c.value_bytes, c.headers, c.hkey_bytes, c.hval_bytes = kpos, vpos, hidx, hkpos, hvpos
    return 0


cdef inline void* _at(object array):
    """The first byte of a contiguous numpy array (no matter its type or size)."""
    cdef uint8_t[::1] view = array.view(np.uint8)
    return <void*>&view[0] if view.shape[0] else NULL


def decode_records(const uint8_t[::1] payload, Py_ssize_t count):
    cdef Py_ssize_t n = payload.shape[0]
    cdef const uint8_t* buf = &payload[0] if n else NULL
    cdef _Columns c
    if count < 0 or count > n:  # a record takes 7 bytes at least: such a count is a corrupt batch's
        raise ValueError(f"{count} records in {n} bytes")
    if n >= 2 ** 31:
        raise ValueError("records of 2 GiB or more")
    c.key_bytes = c.value_bytes = c.headers = c.hkey_bytes = c.hval_bytes = 0
    _scan(buf, n, count, &c, False)
    # four allocations, sliced into the fourteen columns
    cdef Py_ssize_t h = c.headers, kb = c.key_bytes, vb = c.value_bytes, hkb = c.hkey_bytes, a = count + 1
    wide = np.empty(2 * count, np.int64)
    offsets = np.zeros(3 * a + 2 * (h + 1), np.int32)
    flags = np.empty(2 * count + h, np.uint8)
    data = np.empty(kb + vb + hkb + c.hval_bytes, np.uint8)
    cdef int64_t* w = <int64_t*>_at(wide)
    cdef int32_t* o = <int32_t*>_at(offsets)
    cdef uint8_t* f = <uint8_t*>_at(flags)
    cdef uint8_t* d = <uint8_t*>_at(data)
    c.offset_deltas, c.timestamp_deltas = w, w + count
    c.key_offsets, c.value_offsets, c.header_offsets = o, o + a, o + 2 * a
    c.hkey_offsets, c.hval_offsets = o + 3 * a, o + 3 * a + h + 1
    c.key_valid, c.value_valid, c.hval_valid = f, f + count, f + 2 * count
    c.key_data, c.value_data, c.hkey_data, c.hval_data = d, d + kb, d + kb + vb, d + kb + vb + hkb
    _scan(buf, n, count, &c, True)
    return (wide[:count], wide[count:], offsets[:a], flags[:count], data[:kb],
            offsets[a:2 * a], flags[count:2 * count], data[kb:kb + vb],
            offsets[2 * a:3 * a], offsets[3 * a:3 * a + h + 1], data[kb + vb:kb + vb + hkb],
            offsets[3 * a + h + 1:], flags[2 * count:], data[kb + vb + hkb:])


cdef inline object _bytes_or_none(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t end):
    cdef int64_t size
    pos[0] = _read_varint(buf, pos[0], end, &size)
    if size < 0:
        return None
    value = PyBytes_FromStringAndSize(<const char*>buf + pos[0], size)
    pos[0] += size
    return value


def decode_lists(const uint8_t[::1] payload, Py_ssize_t count, int64_t first_timestamp, int64_t max_timestamp,
                 bint log_append_time):
    """The records as Python lists, for a small batch (lakelog's `RecordColumns`: no Arrow work of its own
    until its flush): keys, values (bytes or None), headers (None when no record has any, else per record
    None or [{"key": str, "value": bytes | None}]), timestamps (ms, None where the producer left it out:
    negative). Checked as decode_records checks (ValueError)."""
    cdef Py_ssize_t n = payload.shape[0], pos = 0, end, i, j
    cdef const uint8_t* buf = &payload[0] if n else NULL
    cdef _Columns c
    cdef int64_t length, ts_delta, skipped, hcount, hklen, timestamp
    if count < 0 or count > n:
        raise ValueError(f"{count} records in {n} bytes")
    c.key_bytes = c.value_bytes = c.headers = c.hkey_bytes = c.hval_bytes = 0
    _scan(buf, n, count, &c, False)  # every size checked: below, the same walk without checks
    keys, values, timestamps = PyList_New(count), PyList_New(count), PyList_New(count)
    headers = PyList_New(count) if c.headers else None
    for i in range(count):
        pos = _read_varint(buf, pos, n, &length)
        end = pos + length
        pos = _read_varint(buf, pos + 1, end, &ts_delta)
        pos = _read_varint(buf, pos, end, &skipped)  # the offset delta
        timestamp = max_timestamp if log_append_time else first_timestamp + ts_delta
        _set(keys, i, _bytes_or_none(buf, &pos, end))
        _set(values, i, _bytes_or_none(buf, &pos, end))
        _set(timestamps, i, timestamp if timestamp >= 0 else None)
        pos = _read_varint(buf, pos, end, &hcount)
        if headers is not None:
            pairs = [] if hcount else None
            for j in range(hcount):
                pos = _read_varint(buf, pos, end, &hklen)
                try:
                    key = PyUnicode_DecodeUTF8(<const char*>buf + pos, hklen, NULL)
                except UnicodeDecodeError as exc:
                    raise ValueError(f"record {i}: a header key that is not UTF-8: {exc}") from None
                pos += hklen
                pairs.append({"key": key, "value": _bytes_or_none(buf, &pos, end)})
            _set(headers, i, pairs)
        pos = end
    return keys, values, headers, timestamps


cdef inline void _set(list items, Py_ssize_t i, object value):
    Py_INCREF(value)
    PyList_SET_ITEM(items, i, value)


cdef inline const uint8_t* _bytes_at(const uint8_t[::1] data):
    return &data[0] if data.shape[0] else NULL


def encode_records(const int64_t[::1] offset_deltas, const int64_t[::1] timestamp_deltas,
                   const int32_t[::1] key_offsets, const uint8_t[::1] key_valid, const uint8_t[::1] key_data,
                   const int32_t[::1] value_offsets, const uint8_t[::1] value_valid, const uint8_t[::1] value_data,
                   const int32_t[::1] header_offsets, const int32_t[::1] hkey_offsets,
                   const uint8_t[::1] hkey_data, const int32_t[::1] hval_offsets, const uint8_t[::1] hval_valid,
                   const uint8_t[::1] hval_data, const int64_t[::1] run_starts, Py_ssize_t headroom):
    cdef Py_ssize_t count = offset_deltas.shape[0], i, h, total = 0, pos = 0, run = 0
    cdef Py_ssize_t runs = run_starts.shape[0]
    cdef int64_t body, klen, vlen, hklen, hvlen
    cdef const uint8_t* kd = _bytes_at(key_data)
    cdef const uint8_t* vd = _bytes_at(value_data)
    cdef const uint8_t* hkd = _bytes_at(hkey_data)
    cdef const uint8_t* hvd = _bytes_at(hval_data)
    if (timestamp_deltas.shape[0] != count or key_offsets.shape[0] != count + 1 or key_valid.shape[0] != count
            or value_offsets.shape[0] != count + 1 or value_valid.shape[0] != count
            or header_offsets.shape[0] != count + 1):
        raise ValueError("columns of different lengths")
    if count and (key_offsets[count] > key_data.shape[0] or value_offsets[count] > value_data.shape[0]):
        raise ValueError("offsets past the bytes")
    if count and header_offsets[count] > header_offsets[0]:
        if (hkey_offsets.shape[0] <= header_offsets[count] or hval_offsets.shape[0] <= header_offsets[count]
                or hval_valid.shape[0] < header_offsets[count]):
            raise ValueError("header offsets past the headers")
        if (hkey_offsets[header_offsets[count]] > hkey_data.shape[0]
                or hval_offsets[header_offsets[count]] > hval_data.shape[0]):
            raise ValueError("header offsets past their bytes")
    sizes_array = np.empty(count, np.int64)
    cdef int64_t[::1] sizes = sizes_array
    for i in range(count):
        klen = key_offsets[i + 1] - key_offsets[i] if key_valid[i] else -1
        vlen = value_offsets[i + 1] - value_offsets[i] if value_valid[i] else -1
        body = (1 + _varint_size(timestamp_deltas[i]) + _varint_size(offset_deltas[i]) + _varint_size(klen)
                + (klen if klen > 0 else 0) + _varint_size(vlen) + (vlen if vlen > 0 else 0)
                + _varint_size(header_offsets[i + 1] - header_offsets[i]))
        for h in range(header_offsets[i], header_offsets[i + 1]):
            hklen = hkey_offsets[h + 1] - hkey_offsets[h]
            hvlen = hval_offsets[h + 1] - hval_offsets[h] if hval_valid[h] else -1
            body += _varint_size(hklen) + hklen + _varint_size(hvlen) + (hvlen if hvlen > 0 else 0)
        sizes[i] = body
        total += _varint_size(body) + body
    for i in range(runs):
        if run_starts[i] < 0 or run_starts[i] >= count or (i and run_starts[i] <= run_starts[i - 1]):
            raise ValueError("run starts out of order")
    total += headroom * runs
    out_array = PyByteArray_FromStringAndSize(NULL, total)
    ends_array = np.empty(count, np.int64)
    cdef int64_t[::1] ends = ends_array
    cdef uint8_t* out = <uint8_t*>PyByteArray_AS_STRING(out_array)
    for i in range(count):
        if run < runs and run_starts[run] == i:  # room for the batch header of the run starting here
            pos += headroom
            run += 1
        pos = _write_varint(out, pos, sizes[i])
        out[pos] = 0  # attributes
        pos = _write_varint(out, pos + 1, timestamp_deltas[i])
        pos = _write_varint(out, pos, offset_deltas[i])
        if key_valid[i]:
            klen = key_offsets[i + 1] - key_offsets[i]
            pos = _write_varint(out, pos, klen)
            memcpy(out + pos, kd + key_offsets[i], klen)
            pos += klen
        else:
            pos = _write_varint(out, pos, -1)
        if value_valid[i]:
            vlen = value_offsets[i + 1] - value_offsets[i]
            pos = _write_varint(out, pos, vlen)
            memcpy(out + pos, vd + value_offsets[i], vlen)
            pos += vlen
        else:
            pos = _write_varint(out, pos, -1)
        pos = _write_varint(out, pos, header_offsets[i + 1] - header_offsets[i])
        for h in range(header_offsets[i], header_offsets[i + 1]):
            hklen = hkey_offsets[h + 1] - hkey_offsets[h]
            pos = _write_varint(out, pos, hklen)
            memcpy(out + pos, hkd + hkey_offsets[h], hklen)
            pos += hklen
            if hval_valid[h]:
                hvlen = hval_offsets[h + 1] - hval_offsets[h]
                pos = _write_varint(out, pos, hvlen)
                memcpy(out + pos, hvd + hval_offsets[h], hvlen)
                pos += hvlen
            else:
                pos = _write_varint(out, pos, -1)
        ends[i] = pos
    return out_array, ends_array
