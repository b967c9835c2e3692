"""SASL/PLAIN on lakelog's API keys: the password is an API key, the user name the principal it maps to.

So a principal has the same rights over Kafka as over HTTP (the same ACLs). Without API keys the
server has no authentication, on both protocols (and, as for HTTP, binds only loopback unless told).
"""

from __future__ import annotations

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES
from lakelog.kafka_api.protocol import Call
from lakelog.platform.acl import AuthenticationFailed

MECHANISMS = ["PLAIN"]


async def handshake(context: Context, call: Call) -> SaslHandshakeResponse:
    mechanism = call.body.mechanism
    if mechanism not in MECHANISMS:
        return SaslHandshakeResponse(error_code=CODES["UNSUPPORTED_SASL_MECHANISM"], mechanisms=MECHANISMS)
    context.sasl_mechanism = mechanism
    return SaslHandshakeResponse(error_code=0, mechanisms=MECHANISMS)


async def authenticate(context: Context, call: Call) -> SaslAuthenticateResponse:
    if context.sasl_mechanism is None or context.authenticated:
        return _failed(CODES["ILLEGAL_SASL_STATE"], "SaslAuthenticate without a SaslHandshake first")
    try:
        context.principal = plain_principal(context, bytes(call.body.auth_bytes or b""))
    except AuthenticationFailed as exc:
        return _failed(CODES["SASL_AUTHENTICATION_FAILED"], exc.message)
    context.authenticated = True
    return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0)


def authenticate_raw(context: Context, token: bytes) -> None:
    """The raw token that follows a SaslHandshake v0 (no SaslAuthenticate around it). Raises
    AuthenticationFailed (or the server's state error): the listener then closes the connection."""
    if context.sasl_mechanism is None or context.authenticated:
        raise AuthenticationFailed("a raw SASL token without a SaslHandshake first")
    context.principal = plain_principal(context, token)
    context.authenticated = True


def plain_principal(context: Context, token: bytes) -> str:
    """RFC 4616: [authzid] NUL authcid NUL password."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailed("malformed SASL/PLAIN token")
    authzid, user, password = (part.decode("utf-8", "replace") for part in parts)
    try:
        principal = context.services.authorizer.authenticate(password)
    except AuthenticationFailed:  # its message is HTTP's (an Authorization header)
        raise AuthenticationFailed("invalid SASL/PLAIN credentials: the password must be an API key, the user "
                                   "name its principal") from None
    if user != principal or authzid not in ("", principal):
        raise AuthenticationFailed(f"invalid SASL/PLAIN credentials: the API key belongs to another principal than "
                                   f"{user!r}: use the principal as the user name and the API key as the password")
    return principal


def _failed(code: int, message: str) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"", session_lifetime_ms=0)
