"""Kafka's message sets of "magic" 0 and 1 (the formats before v2 record batches) to and from columns.

Produce v0-v2 carry them and Fetch v0-v3 must answer them: Fetch v0/v1 reads magic 0 (no
timestamps), v2/v3 magic 1 (CreateTime timestamps). Neither format has headers: they are dropped on
the way out, as Kafka drops them when it down-converts. A compressed message set is one "wrapper"
message whose value holds the compressed inner messages: gzip, snappy (xerial framing, as the Java
client writes it) or lz4. Under magic 0, lz4 is Kafka 0.8/0.9's frame, whose header checksum is wrong
(KAFKA-3160) and refused by lz4 libraries: it is corrected on the way in and broken again on the way
out. zstd does not exist in these formats: a zstd topic's records go out uncompressed.

Decoding uses aiokafka's compiled legacy codec, encoding its builder for the inner messages.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence

from aiokafka.codec import gzip_encode, lz4_decode, lz4_encode, snappy_encode
from aiokafka.errors import UnsupportedCodecError
from aiokafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from lakelog.kafka_api.errors import CODES, KafkaProtocolError

GZIP, SNAPPY, LZ4 = 1, 2, 3
CODEC_MASK = 0x07
LOG_OVERHEAD = 12  # offset int64, size int32
MAGIC_AT, ATTRIBUTES_AT = 16, 17  # after offset, size and crc (the magic is there in v2 batches too)
KEY_AT = {0: 18, 1: 26}  # magic 1 has a timestamp int64 before the key
UNLIMITED = 2**31 - 1
Columns = tuple[list[bytes | None], list[bytes | None], list[int | None]]  # keys, values, timestamps


def split(data: bytes | memoryview) -> Iterator[tuple[int, memoryview]]:
    """(magic, bytes) of each top-level message or batch in a produce request's records."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD + 6:
            raise _corrupt(f"{len(view) - pos} trailing bytes are shorter than a message")
        size = struct.unpack_from(">i", view, pos + 8)[0]
        end = pos + LOG_OVERHEAD + size
        if size < 6 or end > len(view):
            raise _corrupt(f"a message of {size} bytes does not fit the {len(view) - pos} left")
        yield view[pos + MAGIC_AT], view[pos:end]
        pos = end


def decode(data: bytes | memoryview) -> Columns:
    """The records of a message set of magic 0 or 1 messages (compressed ones included). Raises
    KafkaProtocolError: CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    timestamps: list[int | None] = []
    for magic, message in split(data):
        if magic not in KEY_AT:
            raise _corrupt(f"a message of magic {magic} among messages of magic 0 and 1")
        try:
            _decode_message(message, magic, (keys, values, timestamps))
        except UnsupportedCodecError as exc:
            raise KafkaProtocolError(str(exc), CODES["UNSUPPORTED_COMPRESSION_TYPE"]) from None
        except KafkaProtocolError:
            raise
        except Exception as exc:  # the codec's own (CorruptRecordException, a decompressor's, and a SystemError
            # from aiokafka's compiled reader for a size below -1, found by fuzzing): the client's bytes are bad
            raise _corrupt(f"unreadable message: {exc}") from None
    return keys, values, timestamps


def _decode_message(message: memoryview, magic: int, into: Columns) -> None:
    batch = LegacyRecordBatch(message, magic)
    if not batch.validate_crc():
        raise _corrupt("message CRC mismatch")
    keys, values, timestamps = into
    if magic == 0 and message[ATTRIBUTES_AT] & CODEC_MASK == LZ4:  # aiokafka refuses 0.8's lz4 frames
        _, value = _key_value(message, KEY_AT[0])
        inner_keys, inner_values, inner_timestamps = decode(lz4_decode(fixed_lz4_frame(value or b"")))
        keys.extend(inner_keys)
        values.extend(inner_values)
        timestamps.extend(inner_timestamps)
        return
    for record in batch:
        keys.append(record.key)
        values.append(record.value)
        timestamp = record.timestamp
        timestamps.append(timestamp if timestamp is not None and timestamp >= 0 else None)  # None: stamped


def _key_value(message: memoryview, pos: int) -> tuple[bytes | None, bytes | None]:
    found: list[bytes | None] = []
    for _ in range(2):
        size = struct.unpack_from(">i", message, pos)[0]
        pos += 4
        found.append(None if size < 0 else bytes(message[pos:pos + size]))
        pos += max(size, 0)
    return found[0], found[1]


def encode(offsets: Sequence[int], timestamps: Sequence[int], keys: Sequence[bytes | None],
           values: Sequence[bytes | None], magic: int, codec: int = 0) -> bytes:
    """A message set of `magic` holding these records at their offsets, compressed as one wrapper
    message when `codec` is gzip, snappy or lz4 (anything else: uncompressed)."""
    if not offsets:
        return b""
    if codec not in (GZIP, SNAPPY, LZ4):
        return _messages(magic, offsets, timestamps, keys, values)
    # Magic 1 numbers the inner messages relative to the first, the wrapper carries the last absolute
    # offset; magic 0 numbers them absolutely. Either way the wrapper's offset is the last one.
    inner_offsets = [offset - offsets[0] for offset in offsets] if magic == 1 else offsets
    inner = _messages(magic, inner_offsets, timestamps, keys, values)
    return _wrapper(offsets[-1], magic, codec, max(timestamps), _compress(inner, codec, magic))


def _messages(magic: int, offsets: Sequence[int], timestamps: Sequence[int], keys: Sequence[bytes | None],
              values: Sequence[bytes | None]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, 0, UNLIMITED)
    for offset, timestamp, key, value in zip(offsets, timestamps, keys, values):
        builder.append(offset, timestamp, key, value)
    return bytes(builder.build())


def _wrapper(offset: int, magic: int, codec: int, timestamp: int, value: bytes) -> bytes:
    body = (struct.pack(">bb", magic, codec) + (struct.pack(">q", timestamp) if magic else b"")
            + struct.pack(">ii", -1, len(value)) + value)  # no key
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _compress(data: bytes, codec: int, magic: int) -> bytes:
    if codec == GZIP:
        return gzip_encode(data)
    if codec == SNAPPY:
        return snappy_encode(data)
    return lz4_encode(data) if magic else broken_lz4_frame(lz4_encode(data))


def _corrupt(message: str) -> KafkaProtocolError:
    return KafkaProtocolError(message, CODES["CORRUPT_MESSAGE"])


# ---- Kafka 0.8/0.9's lz4 frame ---------------------------------------------------------------------
# An lz4 frame starts with a 4-byte magic number, then the descriptor (FLG, BD, an optional 8-byte
# content size, an optional 4-byte dictionary id), then the header checksum: the second byte of the
# descriptor's xxHash32. Kafka before 0.10 hashed the magic number too.

CONTENT_SIZE_FLAG, DICTIONARY_ID_FLAG = 0x08, 0x01


def _descriptor_end(frame: bytes) -> int:
    if len(frame) < 7:
        raise _corrupt("an lz4 frame shorter than its header")
    flags = frame[4]
    return 6 + (8 if flags & CONTENT_SIZE_FLAG else 0) + (4 if flags & DICTIONARY_ID_FLAG else 0)


def fixed_lz4_frame(frame: bytes) -> bytes:
    """A Kafka 0.8/0.9 lz4 frame with the header checksum lz4 libraries expect."""
    end = _descriptor_end(frame)
    return frame[:end] + bytes([xxh32_short(frame[4:end]) >> 8 & 0xFF]) + frame[end + 1:]


def broken_lz4_frame(frame: bytes) -> bytes:
    """A standard lz4 frame with the header checksum Kafka 0.8/0.9 clients expect (over the magic too)."""
    end = _descriptor_end(frame)
    return frame[:end] + bytes([xxh32_short(frame[:end]) >> 8 & 0xFF]) + frame[end + 1:]


PRIME1, PRIME2, PRIME3, PRIME4, PRIME5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
MASK = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & MASK


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (a frame header's; no lz4 header is longer), seed 0 by default:
    none of the installed packages exposes xxHash, and this is all the header checksum needs."""
    if len(data) >= 16:
        raise ValueError("xxh32_short hashes fewer than 16 bytes")
    value = (seed + PRIME5 + len(data)) & MASK
    pos = 0
    while pos + 4 <= len(data):
        value = _rotl((value + int.from_bytes(data[pos:pos + 4], "little") * PRIME3) & MASK, 17) * PRIME4 & MASK
        pos += 4
    for byte in data[pos:]:
        value = _rotl((value + byte * PRIME5) & MASK, 11) * PRIME1 & MASK
    value ^= value >> 15
    value = value * PRIME2 & MASK
    value ^= value >> 13
    value = value * PRIME3 & MASK
    return value ^ (value >> 16)
