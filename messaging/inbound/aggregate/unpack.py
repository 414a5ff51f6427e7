"""The report document inside a message: its attachment, plain, gzip or zip, expanded to a bound.

Decompression streams and stops one byte past the cap, so a bomb costs at most the cap in memory
and the time to inflate it. A zip must hold exactly one file; its name is never used.
"""

import io
import zipfile
import zlib
from email.message import Message as EmailMessage

from messaging.inbound.aggregate import ReportRefused

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"
_READ_CHUNK = 64 * 1024
# Parts that may carry a report: what Google, Yahoo, Microsoft, Mail.ru and RFC 8460 use, and the
# generic types small reporters send it as.
_REPORT_TYPES = {
    "application/gzip",
    "application/x-gzip",
    "application/zip",
    "application/x-zip",
    "application/x-zip-compressed",
    "application/xml",
    "text/xml",
    "application/json",
    "application/tlsrpt+json",
    "application/tlsrpt+gzip",
    "application/octet-stream",
}


def report_attachment(message: EmailMessage) -> bytes:
    """The decoded bytes of the first part that carries a report (the body of a one-part message)."""
    for part in message.walk():
        if part.is_multipart() or part.get_content_type() not in _REPORT_TYPES:
            continue
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes) and payload:
            return payload
    raise ReportRefused("no report attachment (gzip, zip, XML or JSON part)")


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    out = bytearray()
    pending = data
    try:
        while not inflater.eof:
            piece = inflater.decompress(pending, limit + 1 - len(out))
            out += piece
            if len(out) > limit:
                raise ReportRefused(f"gzip report expands beyond {limit} bytes (MAILSERVICE_REPORT_MAX_BYTES)")
            if not piece and not inflater.unconsumed_tail:
                raise ReportRefused("gzip report is truncated")
            pending = inflater.unconsumed_tail
    except zlib.error as exc:
        raise ReportRefused(f"gzip report is corrupt: {exc}") from None
    return bytes(out)


def _unzip(data: bytes, limit: int) -> bytes:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [info for info in archive.infolist() if not info.is_dir()]
            if len(members) != 1:
                raise ReportRefused(f"zip report holds {len(members)} files, not one")
            out = bytearray()
            with archive.open(members[0]) as member:
                while chunk := member.read(min(_READ_CHUNK, limit + 1 - len(out))):
                    out += chunk
                    if len(out) > limit:
                        raise ReportRefused(f"zip report expands beyond {limit} bytes (MAILSERVICE_REPORT_MAX_BYTES)")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise ReportRefused(f"zip report cannot be read: {exc}") from None
    return bytes(out)


def report_document(attachment: bytes, *, limit: int) -> bytes:
    """The report itself: the attachment expanded by what its first bytes say it is, at most `limit` bytes."""
    if attachment.startswith(_GZIP_MAGIC):
        return _gunzip(attachment, limit)
    if attachment.startswith(_ZIP_MAGIC):
        return _unzip(attachment, limit)
    if len(attachment) > limit:
        raise ReportRefused(f"report is larger than {limit} bytes (MAILSERVICE_REPORT_MAX_BYTES)")
    return attachment
