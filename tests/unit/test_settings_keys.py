"""settings.py: the API keys parsed once, the same value for the exposure check and the authorizer."""

from __future__ import annotations

import pytest

from lakelog.ingest_api.server import RefusedToStart, check_exposure
from lakelog.settings import Settings


@pytest.mark.parametrize("keys,on", [(None, False), ("{}", False), ('{"k": "admin"}', True)])
def test_authentication_follows_the_parsed_keys(keys: str | None, on: bool) -> None:
    settings = Settings(host="0.0.0.0", api_keys_json=keys)
    assert settings.authentication is on
    if on:
        check_exposure(settings)
    else:
        with pytest.raises(RefusedToStart):
            check_exposure(settings)


@pytest.mark.parametrize("keys", ['["k"]', '{"k": 1}', '{"": "admin"}', "not json"])
def test_malformed_keys_are_refused_at_start(keys: str) -> None:
    with pytest.raises(ValueError, match="api_keys_json"):
        Settings(api_keys_json=keys)
