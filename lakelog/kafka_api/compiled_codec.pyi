# The compiled module's signatures (compiled_codec.pyx); python_codec.py is the same in pure Python.
import numpy as np

def decode_records(payload: bytes | bytearray | memoryview, count: int) -> tuple[np.ndarray, ...]: ...
def encode_records(offset_deltas: np.ndarray, timestamp_deltas: np.ndarray,
                   key_offsets: np.ndarray, key_valid: np.ndarray, key_data: np.ndarray,
                   value_offsets: np.ndarray, value_valid: np.ndarray, value_data: np.ndarray,
                   header_offsets: np.ndarray, hkey_offsets: np.ndarray, hkey_data: np.ndarray,
                   hval_offsets: np.ndarray, hval_valid: np.ndarray,
                   hval_data: np.ndarray, run_starts: np.ndarray, headroom: int) -> tuple[bytearray, np.ndarray]: ...

HARDWARE_CRC32C: bool

def crc32c(data: bytes | bytearray | memoryview) -> int: ...
def decode_lists(payload: bytes | bytearray | memoryview, count: int, first_timestamp: int, max_timestamp: int,
                 log_append_time: bool) -> tuple[list, list, list | None, list]: ...
