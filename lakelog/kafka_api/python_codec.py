"""The pure-Python twin of `compiled_codec.pyx`: the same two functions, the same shapes and errors, record by
record. `record_codec.py` uses it only where the compiled module was not built (no C compiler at install);
the tests run both against kafka-python's codec."""

from __future__ import annotations

import numpy as np
from aiokafka.record.util import calc_crc32c

HARDWARE_CRC32C = False


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of `data`, as a v2 batch carries it: aiokafka's."""
    return calc_crc32c(bytes(data))


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ValueError("a varint runs past the end of its record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("a varint of more than 10 bytes")
    result &= (1 << 64) - 1
    return (result >> 1) ^ -(result & 1), pos


def _varint(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_records(payload: bytes | bytearray | memoryview, count: int) -> tuple[np.ndarray, ...]:
    buf = bytes(payload)
    n = len(buf)
    if count < 0 or count > n:
        raise ValueError(f"{count} records in {n} bytes")
    offset_deltas, timestamp_deltas = [], []
    key_valid: list[int] = []
    value_valid: list[int] = []
    key_offsets, keys = [0], bytearray()
    value_offsets, values = [0], bytearray()
    header_offsets, hkey_offsets, hkeys = [0], [0], bytearray()
    hval_offsets, hval_valid, hvals = [0], [], bytearray()
    pos = 0
    for i in range(count):
        length, pos = _read_varint(buf, pos, n)
        if length < 0 or length > n - pos:
            raise ValueError(f"record {i}: length {length} with {n - pos} bytes left")
        start, end = pos, pos + length
        if pos >= end:
            raise ValueError(f"record {i}: no attributes")
        pos += 1
        ts_delta, pos = _read_varint(buf, pos, end)
        off_delta, pos = _read_varint(buf, pos, end)
        for name, offsets, valid, data in (("key", key_offsets, key_valid, keys),
                                           ("value", value_offsets, value_valid, values)):
            size, pos = _read_varint(buf, pos, end)
            if size >= 0:
                if size > end - pos:
                    raise ValueError(f"record {i}: {name} of {size} bytes past the record's end")
                data += buf[pos:pos + size]
                pos += size
            valid.append(1 if size >= 0 else 0)
            offsets.append(len(data))
        hcount, pos = _read_varint(buf, pos, end)
        if hcount < 0 or hcount > end - pos:
            raise ValueError(f"record {i}: invalid number of headers {hcount}")
        for _ in range(hcount):
            hklen, pos = _read_varint(buf, pos, end)
            if hklen < 0 or hklen > end - pos:
                raise ValueError(f"record {i}: invalid header key size {hklen}")
            hkeys += buf[pos:pos + hklen]
            pos += hklen
            hkey_offsets.append(len(hkeys))
            hvlen, pos = _read_varint(buf, pos, end)
            if hvlen >= 0:
                if hvlen > end - pos:
                    raise ValueError(f"record {i}: header value of {hvlen} bytes past the record's end")
                hvals += buf[pos:pos + hvlen]
                pos += hvlen
            hval_valid.append(1 if hvlen >= 0 else 0)
            hval_offsets.append(len(hvals))
        if pos != end:
            raise ValueError(f"record {i}: expected to read {length} bytes, read {pos - start}")
        offset_deltas.append(off_delta)
        timestamp_deltas.append(ts_delta)
        header_offsets.append(len(hkey_offsets) - 1)
    if pos != n:
        raise ValueError(f"{n - pos} unconsumed bytes after all records")

    def u8(data: bytes | bytearray | list[int]) -> np.ndarray:
        return np.frombuffer(bytes(data), np.uint8).copy() if not isinstance(data, list) else np.array(data, np.uint8)

    return (np.array(offset_deltas, np.int64), np.array(timestamp_deltas, np.int64),
            np.array(key_offsets, np.int32), u8(key_valid), u8(keys),
            np.array(value_offsets, np.int32), u8(value_valid), u8(values),
            np.array(header_offsets, np.int32), np.array(hkey_offsets, np.int32), u8(hkeys),
            np.array(hval_offsets, np.int32), u8(hval_valid), u8(hvals))


def encode_records(offset_deltas: np.ndarray, timestamp_deltas: np.ndarray,
                   key_offsets: np.ndarray, key_valid: np.ndarray, key_data: np.ndarray,
                   value_offsets: np.ndarray, value_valid: np.ndarray, value_data: np.ndarray,
                   header_offsets: np.ndarray, hkey_offsets: np.ndarray, hkey_data: np.ndarray,
                   hval_offsets: np.ndarray, hval_valid: np.ndarray,
                   hval_data: np.ndarray, run_starts: np.ndarray, headroom: int) -> tuple[bytearray, np.ndarray]:
    count = len(offset_deltas)
    if (len(timestamp_deltas) != count or len(key_offsets) != count + 1 or len(key_valid) != count
            or len(value_offsets) != count + 1 or len(value_valid) != count or len(header_offsets) != count + 1):
        raise ValueError("columns of different lengths")
    kd, vd, hkd, hvd = (np.asarray(a, np.uint8).tobytes() for a in (key_data, value_data, hkey_data, hval_data))
    if any(not 0 <= start < count for start in run_starts) or any(np.diff(run_starts) <= 0):
        raise ValueError("run starts out of order")
    out, ends, starts = bytearray(), [], set(int(start) for start in run_starts)
    for i in range(count):
        if i in starts:
            out += bytes(headroom)
        body = bytearray(b"\x00")  # attributes
        body += _varint(int(timestamp_deltas[i])) + _varint(int(offset_deltas[i]))
        for offsets, valid, data in ((key_offsets, key_valid, kd), (value_offsets, value_valid, vd)):
            if valid[i]:
                body += _varint(int(offsets[i + 1] - offsets[i])) + data[offsets[i]:offsets[i + 1]]
            else:
                body += _varint(-1)
        body += _varint(int(header_offsets[i + 1] - header_offsets[i]))
        for h in range(header_offsets[i], header_offsets[i + 1]):
            body += _varint(int(hkey_offsets[h + 1] - hkey_offsets[h])) + hkd[hkey_offsets[h]:hkey_offsets[h + 1]]
            if hval_valid[h]:
                body += _varint(int(hval_offsets[h + 1] - hval_offsets[h])) + hvd[hval_offsets[h]:hval_offsets[h + 1]]
            else:
                body += _varint(-1)
        out += _varint(len(body)) + body
        ends.append(len(out))
    return out, np.array(ends, np.int64)


def decode_lists(payload: bytes | bytearray | memoryview, count: int, first_timestamp: int, max_timestamp: int,
                 log_append_time: bool) -> tuple[list, list, list | None, list]:
    (_, timestamp_deltas, key_offsets, key_valid, key_data, value_offsets, value_valid, value_data,
     header_offsets, hkey_offsets, hkey_data, hval_offsets, hval_valid, hval_data) = decode_records(payload, count)

    def column(offsets: np.ndarray, valid: np.ndarray, data: np.ndarray) -> list[bytes | None]:
        raw = data.tobytes()
        return [raw[offsets[i]:offsets[i + 1]] if valid[i] else None for i in range(len(valid))]

    hkeys = hkey_data.tobytes()
    try:
        names = [hkeys[hkey_offsets[h]:hkey_offsets[h + 1]].decode() for h in range(len(hkey_offsets) - 1)]
    except UnicodeDecodeError as exc:
        raise ValueError(f"a header key that is not UTF-8: {exc}") from None
    hvalues = column(hval_offsets, hval_valid, hval_data)
    headers = None if len(names) == 0 else [
        [{"key": names[h], "value": hvalues[h]} for h in range(header_offsets[i], header_offsets[i + 1])] or None
        for i in range(count)]
    timestamps = [max_timestamp if log_append_time else _int64(first_timestamp + int(d)) for d in timestamp_deltas]
    return (column(key_offsets, key_valid, key_data), column(value_offsets, value_valid, value_data), headers,
            [t if t >= 0 else None for t in timestamps])


def _int64(value: int) -> int:
    """As the compiled module's (and numpy's) int64 sum wraps."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)
