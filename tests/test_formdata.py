"""The multipart reader that finds a form's `model` field (proxy/formdata.py):
named cases, hypothesis forms with filler of every kind around the field,
and the same forms read by Starlette's parser (what FastAPI upstreams run)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.datastructures import Headers
from starlette.formparsers import MultiPartParser

from proxy import formdata
from proxy.formdata import UnreadableForm, form_values

LIMIT = 8192
B = b"XyZ-boundary"
CT = "multipart/form-data; boundary=XyZ-boundary"


def models(body: bytes, content_type: str = CT, limit: int = LIMIT) -> list[str]:
    return form_values([content_type], body, b"model", limit)


def part(name: str, value: bytes, *extra: bytes, nl: bytes = b"\r\n") -> bytes:
    head = [b'Content-Disposition: form-data; name="' + name.encode() + b'"', *extra]
    return b"--" + B + nl + nl.join(head) + nl + nl + value + nl


def form(*parts: bytes, nl: bytes = b"\r\n") -> bytes:
    return b"".join(parts) + b"--" + B + b"--" + nl


AUDIO = bytes(range(256)) * 4


# -- named cases -------------------------------------------------------------------


def test_the_openai_sdk_upload_as_httpx_encodes_it() -> None:
    request = httpx.Request(
        "POST",
        "http://proxy/v1/audio/transcriptions",
        files={"file": ("speech.wav", AUDIO, "audio/wav")},
        data={"model": "whisper-1", "language": "en"},
    )
    assert models(request.read(), request.headers["content-type"]) == ["whisper-1"]


@pytest.mark.parametrize(
    "content_type",
    [
        'multipart/form-data; boundary="XyZ-boundary"',
        "Multipart/Form-Data;Boundary=XyZ-boundary",
        'multipart/form-data; charset=utf-8; boundary = "XyZ-boundary" ',
        r'multipart/form-data; boundary="XyZ\-boundary"',
        "multipart/form-data; boundary*=utf-8''XyZ%2Dboundary",
    ],
    ids=["quoted", "case-and-spacing", "spaces-around-equals", "escaped", "rfc2231"],
)
def test_the_boundary_however_the_content_type_writes_it(content_type: str) -> None:
    assert models(form(part("model", b"m-1")), content_type) == ["m-1"]


@pytest.mark.parametrize(
    "content_type",
    [
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=other",
    ],
    ids=["no-boundary", "empty-boundary", "another-boundary"],
)
def test_a_form_without_its_boundary_has_no_fields(content_type: str) -> None:
    assert models(form(part("model", b"m-1")), content_type) == []


def test_no_content_type_and_an_empty_body_have_no_fields() -> None:
    assert form_values([], form(part("model", b"m-1")), b"model", LIMIT) == []
    assert models(b"") == []


@pytest.mark.parametrize("nl", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_line_endings_crlf_or_lf(nl: bytes) -> None:
    body = form(part("file", AUDIO, nl=nl), part("model", b"m-1", nl=nl), nl=nl)
    assert models(body) == ["m-1"]


def test_mixed_line_endings_padding_preamble_and_epilogue() -> None:
    body = (
        b"This is the preamble.\r\n--XyZ-boundary-not\r\n"
        + b"--" + B + b" \t\r\n"
        + b'content-disposition :form-data;name=model\n'
        + b"Content-Type: text/plain\r\n"
        + b"\n"
        + b"m-1\r\n--" + B + b"--\r\nepilogue"
    )  # fmt: skip
    assert models(body) == ["m-1"]


def test_a_model_header_inside_a_file_is_content() -> None:
    """Regression: the field is a part's header, never text in a file."""
    fake = b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nexpensive\r\n'
    body = form(part("file", fake + b"--" + B + b"x" + fake, b"Content-Type: text/plain"))
    assert models(body) == []
    assert models(form(part("file", fake), part("model", b"cheap"))) == ["cheap"]


def test_a_model_header_in_the_preamble_is_content() -> None:
    preamble = b'Content-Disposition: form-data; name="model"\r\n\r\nexpensive\r\n'
    assert models(preamble + form(part("purpose", b"batch"))) == []


def test_a_part_after_the_close_still_counts() -> None:
    """A close one parser sees (LF only) may be content to another."""
    body = form(part("file", b"x")) + part("model", b"m-1") + b"--" + B + b"--\r\n"
    assert models(body) == ["m-1"]


def test_a_form_cut_short_counts_as_far_as_it_goes() -> None:
    whole = form(part("model", b"m-1"), part("file", AUDIO))
    value_end = whole.index(b"m-1") + 3
    for cut in range(value_end, value_end + len(b"\r\n--" + B) + 1):
        assert models(whole[:cut]) == ["m-1"], cut
    assert models(whole[: value_end - 1]) == ["m-"]
    assert models(whole[: whole.index(b"m-1")]) == [""]
    assert models(whole[: whole.index(b"m-1") - 2]) == []  # its headers do not end
    # what could start a delimiter is trimmed only after a line break of the value
    cut = b"--" + B + b'\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
    assert models(cut + b"-") == ["-"]
    assert models(cut + b"--" + B[:3]) == ["--" + B[:3].decode()]
    assert models(cut + b"m\r\n--" + B[:3]) == ["m"]


@pytest.mark.parametrize(
    "disposition",
    [
        b"form-data; name=model",
        b'form-data; name="mo\\del"',
        b"form-data; name*=utf-8''%6Dodel",
        b'form-data; name*0="mo"; name*1="del"',
        b"form-data; name*0*=utf-8''mo; name*1*=%64el",
        b'form-data; filename="a;b"; name="model"',
        b'attachment; name="model"; filename="m.txt"',
        b'form-data; name="model',
    ],
    ids=[
        "bare",
        "escaped",
        "rfc2231",
        "continued",
        "continued-extended",
        "semicolon-in-quotes",
        "other-type-with-filename",
        "unclosed-quote",
    ],
)
def test_the_name_however_the_disposition_writes_it(disposition: bytes) -> None:
    body = b"--" + B + b"\r\nContent-Disposition: " + disposition + b"\r\n\r\nm-1\r\n--" + B + b"--"
    assert models(body) == ["m-1"]


def test_a_folded_disposition_counts() -> None:
    body = form(b"--" + B + b'\r\nContent-Disposition: form-data;\r\n name="model"\r\n\r\nm-1\r\n')
    assert models(body) == ["m-1"]


@pytest.mark.parametrize(
    "disposition",
    [b'form-data; name="models"', b'form-data; name="Model"', b'form-data; filename="model"'],
)
def test_other_names_are_other_fields(disposition: bytes) -> None:
    body = b"--" + B + b"\r\nContent-Disposition: " + disposition + b"\r\n\r\nm-1\r\n--" + B + b"--"
    assert models(body) == []


def test_every_model_field_is_given_each_value_once() -> None:
    assert models(form(part("model", b"a"), part("file", AUDIO), part("model", b"a"))) == ["a"]
    assert models(form(part("model", b"a"), part("model", b"b"))) == ["a", "b"]


def test_two_content_types_and_two_boundaries_are_each_read() -> None:
    body = form(part("model", b"a")).replace(B, b"other") + form(part("model", b"b"))
    types = ["multipart/form-data; boundary=other", CT]
    assert sorted(form_values(types, body, b"model", LIMIT)) == ["a", "b"]
    assert sorted(models(body, CT + "; boundary=other")) == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (form(part("model", b"bW9kZWw=", b"Content-Transfer-Encoding: base64")), CT),
        (form(part("model", b"x" * (LIMIT + 1))), CT),
        (form(part("model", b"\xff\xfe")), CT),
        (form(*[part("f", b"") for _ in range(formdata.MAX_DELIMITERS)]), CT),
        (b"--" + B + b"\r\n" + b"X-Long: " + b"x" * formdata.MAX_PART_HEAD + b"\r\n\r\n", CT),
        (
            b"--"
            + B
            + b"\r\nContent-Disposition: form-data"
            + b";a=b" * (formdata.MAX_PARAMS + 1)
            + b"\r\n\r\n",
            CT,
        ),
        (form(part("f", b"", *[b"Content-Disposition: x"] * formdata.MAX_HEADERS)), CT),
        (
            b"",
            "multipart/form-data"
            + "".join(f"; boundary=b{i}" for i in range(formdata.MAX_BOUNDARIES + 1)),
        ),
    ],
    ids=[
        "base64",
        "too-long",
        "not-utf-8",
        "too-many-parts",
        "headers-too-long",
        "too-many-parameters",
        "too-many-headers",
        "too-many-boundaries",
    ],
)
def test_what_cannot_be_read_here_is_said(body: bytes, content_type: str) -> None:
    with pytest.raises(UnreadableForm):
        models(body, content_type)


def test_an_identity_transfer_encoding_and_a_value_at_the_limit_are_read() -> None:
    body = form(part("model", b"x" * LIMIT, b"Content-Transfer-Encoding: 8BIT"))
    assert models(body) == ["x" * LIMIT]


# -- hypothesis: the field whatever surrounds it -------------------------------------------

BCHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=?"
boundaries = st.text(BCHARS, min_size=1, max_size=70).map(str.encode)
model_names = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\r\n"), max_size=40
)
field_names = st.text("abcdefghijklmnopqrstuvwxyz_[]", min_size=1, max_size=12).filter(
    lambda n: n != "model"
)
# content built from the pieces that could confuse a reader, and any bytes
tricky = st.sampled_from(
    [
        b"\r\n",
        b"\n",
        b"\r",
        b"--",
        b" ",
        b'Content-Disposition: form-data; name="model"',
        b"\r\n\r\n",
        b"model",
        b'"',
        b";",
    ]
)


def clean(content: bytes, dash: bytes) -> bytes:
    """Content in which no line starts with the delimiter (RFC 2046 asks the
    boundary to be chosen so), and which does not start with it."""
    content = content.replace(b"\n" + dash, b"\nx" + dash)
    return b"x" + content if content.startswith(dash) else content


@st.composite
def contents(draw: st.DrawFn, dash: bytes) -> bytes:
    pieces = draw(st.lists(st.one_of(tricky, st.binary(max_size=20), st.just(dash)), max_size=12))
    return clean(b"".join(pieces), dash)


@st.composite
def forms(draw: st.DrawFn, strict: bool = False) -> tuple[str, bytes, str, int]:
    """(Content-Type, body, the model, where its value ends) with filler
    parts before and after the model's part. `strict`: only what Starlette
    reads (CRLF, no padding, no preamble); else LF or CRLF per line, padding
    after delimiters, a preamble and an epilogue."""
    boundary = draw(boundaries)
    dash = b"--" + boundary
    model = draw(model_names.filter(lambda m: not m.encode().startswith(dash)))

    def nl() -> bytes:
        return b"\r\n" if strict else draw(st.sampled_from([b"\r\n", b"\n"]))

    def delimiter() -> bytes:
        padding = b"" if strict else draw(st.sampled_from([b"", b" ", b"\t ", b"  "]))
        return dash + padding + nl()

    def filler() -> bytes:
        name = draw(field_names).encode()
        headers = [b'Content-Disposition: form-data; name="' + name + b'"']
        if draw(st.booleans()):
            headers[0] += b'; filename="' + name + b'.bin"'
            headers.append(b"Content-Type: application/octet-stream")
        content = draw(contents(dash))
        return delimiter() + b"".join(h + nl() for h in headers) + nl() + content + nl()

    body = b""
    if not strict:
        preamble = draw(contents(dash))
        body += preamble + nl() if preamble else b""
    body += b"".join(filler() for _ in range(draw(st.integers(0, 3))))
    disposition = draw(st.sampled_from([b'form-data; name="model"', b"form-data; name=model"]))
    body += delimiter() + b"Content-Disposition: " + disposition + nl() + nl() + model.encode()
    value_end = len(body)
    body += nl() + b"".join(filler() for _ in range(draw(st.integers(0, 3))))
    body += dash + b"--" + nl()
    if not strict:
        body += draw(contents(dash))
    written = boundary.decode()
    if draw(st.booleans()) or any(c in boundary for c in b"()+,/:=?'"):
        written = f'"{written}"'
    return f"multipart/form-data; boundary={written}", body, model, value_end


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(forms())
def test_the_field_is_found_whatever_surrounds_it(case: tuple[str, bytes, str, int]) -> None:
    content_type, body, model, _ = case
    assert form_values([content_type], body, b"model", LIMIT) == [model]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(forms(), st.data())
def test_a_form_cut_after_the_field_still_gives_it(
    case: tuple[str, bytes, str, int], data: st.DataObject
) -> None:
    content_type, body, model, value_end = case
    cut = data.draw(st.integers(value_end, len(body)))
    assert form_values([content_type], body[:cut], b"model", LIMIT) == [model]


@st.composite
def forms_without_the_field(draw: st.DrawFn) -> tuple[str, bytes]:
    """Files whose content holds the field's headers, the boundary (not at a
    line start) and blank lines: the form still has no model."""
    boundary = draw(boundaries)
    dash = b"--" + boundary
    fake = b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nexpensive\r\n'
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        content = clean(draw(contents(dash)) + fake + draw(contents(dash)) + dash + fake, dash)
        parts.append(
            dash + b'\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
            + content + b"\r\n"
        )  # fmt: skip
    return f'multipart/form-data; boundary="{boundary.decode()}"', b"".join(parts) + dash + b"--"


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(forms_without_the_field())
def test_the_field_in_a_files_content_never_counts(case: tuple[str, bytes]) -> None:
    content_type, body = case
    assert form_values([content_type], body, b"model", LIMIT) == []


@settings(max_examples=500)
@given(st.text(max_size=80), st.binary(max_size=400))
def test_any_input_gives_values_from_the_body_or_says_it_cannot(
    content_type: str, body: bytes
) -> None:
    content_type = content_type.encode("latin-1", "replace").decode("latin-1")
    try:
        values = form_values([content_type], body, b"model", LIMIT)
    except UnreadableForm:
        return
    assert all(v.encode() in body for v in values)


@settings(max_examples=500)
@given(boundaries, st.lists(st.one_of(tricky, st.binary(max_size=8)), max_size=30))
def test_any_mix_of_delimiters_and_headers_reads_or_says_it_cannot(
    boundary: bytes, pieces: list[bytes]
) -> None:
    dash = b"--" + boundary
    body = b"".join(dash if p == b"--" else p for p in pieces)
    try:
        values = form_values(
            [f'multipart/form-data; boundary="{boundary.decode()}"'], body, b"model", LIMIT
        )
    except UnreadableForm:
        return
    assert all(v.encode() in body for v in values)


# -- the same forms through Starlette's parser ----------------------------------------------


def starlette_models(content_type: str, body: bytes) -> list[str]:
    async def stream() -> AsyncIterator[bytes]:
        yield body

    async def parse() -> list[str]:
        parser = MultiPartParser(Headers({"content-type": content_type}), stream())
        parsed = await parser.parse()
        try:
            return [v for v in parsed.getlist("model") if isinstance(v, str)]
        finally:
            await parsed.close()  # the files' spooled temporaries

    return asyncio.run(parse())


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(forms(strict=True))
def test_starlette_reads_the_same_model(case: tuple[str, bytes, str, int]) -> None:
    content_type, body, model, _ = case
    assert starlette_models(content_type, body) == [model]
    assert form_values([content_type], body, b"model", LIMIT) == [model]
