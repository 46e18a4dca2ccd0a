"""Media token estimates, on images and PDFs written by Pillow (a writer we did not write).

Images: ``ceil(width * height / 750)`` tokens capped at 1,600, the size read from the PNG,
GIF, JPEG (baseline and progressive) or WebP (lossy, and extended with alpha) header;
1,600 when the size cannot be read. PDFs: 1,500 tokens per page, at least one.
"""

from __future__ import annotations

import base64
import io
import math
import struct
from typing import Any

import pytest

from contextstore.core.tokens import (
    IMAGE_TOKENS_MAX,
    MESSAGE_OVERHEAD_TOKENS,
    PDF_TOKENS_PER_PAGE,
    block_tokens,
    document_tokens,
    image_dimensions,
    image_tokens,
    message_tokens,
)

Image = pytest.importorskip("PIL.Image")

SIZES = [(1, 1), (3, 2), (300, 250), (17, 1_023), (1_023, 17), (256, 256), (2_000, 1_000)]
FORMATS: dict[str, dict[str, Any]] = {
    "png": {"format": "PNG"},
    "gif": {"format": "GIF"},
    "jpeg": {"format": "JPEG"},
    "progressive jpeg": {"format": "JPEG", "progressive": True},
    "jpeg with exif": {"format": "JPEG", "exif": b"Exif\x00\x00" + b"\x00" * 40},
    "webp lossy": {"format": "WEBP", "lossless": False},
}


def _encoded(size: tuple[int, int], options: dict[str, Any], mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    colour = (255, 0, 0, 128) if mode == "RGBA" else "red"
    Image.new(mode, size, colour).save(out, **options)
    return out.getvalue()


def _source(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}


def _expected_tokens(width: int, height: int) -> int:
    return min(IMAGE_TOKENS_MAX, math.ceil(width * height / 750))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_the_size_is_read_from_the_header(kind: str, size: tuple[int, int]) -> None:
    data = _encoded(size, FORMATS[kind])
    assert image_dimensions(data) == size
    assert image_tokens(_source(data)) == _expected_tokens(*size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_an_extended_webp_with_alpha_is_read(size: tuple[int, int]) -> None:
    data = _encoded(size, {"format": "WEBP", "lossless": False}, "RGBA")
    assert data[12:16] == b"VP8X"
    assert image_dimensions(data) == size


def test_a_lossless_webp_is_an_unknown_size_and_costs_the_maximum() -> None:
    data = _encoded((10, 10), {"format": "WEBP", "lossless": True})
    assert data[12:16] == b"VP8L"
    assert image_dimensions(data) is None
    assert image_tokens(_source(data)) == IMAGE_TOKENS_MAX


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((750, 1), 1), ((751, 1), 2), ((1_200, 1_000), 1_600), ((1_199, 1_000), 1_599)],
)
def test_the_rule_and_its_cap_at_the_boundaries(size: tuple[int, int], tokens: int) -> None:
    assert image_tokens(_source(_encoded(size, {"format": "PNG"}))) == tokens


def test_only_the_head_of_a_large_image_is_decoded() -> None:
    """The header is read from the first 64 KiB of base64; trailing garbage is never read."""
    data = _encoded((40, 30), {"format": "PNG"})
    source = _source(data + b"\x00" * 200_000)
    source["data"] += "!!!! not base64 !!!!"
    assert image_tokens(source) == _expected_tokens(40, 30)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 10,
        b"GIF89a\x01",
        b"RIFF\x00\x00\x00\x00WEBPVP8 ",
        b"RIFF\x00\x00\x00\x00WEBPXXXX" + b"\x00" * 20,
        b"\xff\xd8\xff\xe0\x00\x10JFIF",
        b"\xff\xd8\x00\x00" + b"\x00" * 20,
        b"not an image at all, just text",
    ],
    ids=[
        "empty",
        "short png",
        "short gif",
        "short webp",
        "odd webp",
        "jpeg header only",
        "broken jpeg",
        "text",
    ],
)
def test_an_unreadable_header_is_an_unknown_size(data: bytes) -> None:
    assert image_dimensions(data) is None
    assert image_tokens(_source(data)) == IMAGE_TOKENS_MAX


@pytest.mark.parametrize(
    "source",
    [
        {"type": "url", "url": "https://example.invalid/a.png"},
        {"type": "base64", "media_type": "image/png", "data": 5},
        {"type": "base64", "media_type": "image/png", "data": "%%%%"},
        {"type": "base64", "media_type": "image/png"},
        {},
    ],
    ids=["url", "data not text", "data not base64", "no data", "empty"],
)
def test_an_image_that_cannot_be_read_costs_the_maximum(source: dict[str, Any]) -> None:
    assert image_tokens(source) == IMAGE_TOKENS_MAX


def _pdf(pages: int) -> bytes:
    out = io.BytesIO()
    first, *rest = [Image.new("RGB", (20, 20), "white") for _ in range(pages)]
    first.save(out, format="PDF", save_all=True, append_images=rest)
    return out.getvalue()


@pytest.mark.parametrize("pages", [1, 2, 5])
def test_a_pdf_costs_its_pages(pages: int) -> None:
    source = _source(_pdf(pages), "application/pdf")
    assert document_tokens(source, len) == PDF_TOKENS_PER_PAGE * pages
    block = {"type": "document", "source": source}
    assert block_tokens(block, len) == PDF_TOKENS_PER_PAGE * pages


@pytest.mark.parametrize(
    "source",
    [
        {
            "type": "base64",
            "media_type": "application/pdf",
            "data": base64.b64encode(b"%PDF-1.4").decode(),
        },
        {"type": "base64", "media_type": "application/pdf", "data": "%%%"},
        {"type": "url", "url": "https://example.invalid/a.pdf"},
        {"type": "file", "file_id": "f1"},
    ],
    ids=["no page object", "not base64", "url", "unknown kind"],
)
def test_a_pdf_without_countable_pages_costs_one_page(source: dict[str, Any]) -> None:
    assert document_tokens(source, len) == PDF_TOKENS_PER_PAGE


def test_text_and_content_documents_count_their_text() -> None:
    assert document_tokens({"type": "text", "data": "abcd"}, len) == 4
    assert document_tokens({"type": "text", "data": 5}, len) == 0
    content = {
        "type": "content",
        "content": [{"type": "text", "text": "abc"}, {"type": "text", "text": "de"}],
    }
    assert document_tokens(content, len) == 5
    assert document_tokens({"type": "content", "content": "not a list"}, len) == 0


def test_every_block_kind_and_the_message_overhead() -> None:
    class Counter:
        name = "len"

        def count(self, text: str) -> int:
            return len(text)

    blocks: list[Any] = [
        {"type": "text", "text": "hello"},
        {"type": "tool_use", "name": "ls", "input": {"b": 1, "a": "é"}},
        {"type": "tool_result", "content": "out"},
        {"type": "tool_result", "content": [{"type": "text", "text": "in"}, "junk"]},
        {"type": "thinking", "thinking": "hmm"},
        {"type": "redacted_thinking", "data": "x" * 9},
        {"type": "unknown"},
        "not a block",
    ]
    arguments = '{"a": "é", "b": 1}'
    expected = 5 + (2 + len(arguments)) + 3 + 2 + 3 + 3
    assert message_tokens(blocks, Counter()) == MESSAGE_OVERHEAD_TOKENS + expected


# -- header boundaries, built byte by byte where Pillow would not write them --------------


def _png_header(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", width, height)


def _gif_header(signature: bytes, width: int, height: int) -> bytes:
    return signature + struct.pack("<HH", width, height)


def _jpeg(sof: int, width: int, height: int, app_length: int = 16) -> bytes:
    app = b"\xff\xe0" + app_length.to_bytes(2, "big") + b"\x00" * (app_length - 2)
    frame = bytes([0xFF, sof]) + (17).to_bytes(2, "big") + b"\x08"
    return b"\xff\xd8" + app + frame + struct.pack(">HH", height, width) + b"\x03" + b"\x00" * 9


def test_a_png_header_of_exactly_24_bytes_is_enough() -> None:
    assert len(_png_header(7, 9)) == 24
    assert image_dimensions(_png_header(7, 9)) == (7, 9)
    assert image_dimensions(_png_header(7, 9)[:23]) is None


@pytest.mark.parametrize("signature", [b"GIF87a", b"GIF89a"])
def test_both_gif_signatures_and_a_ten_byte_header(signature: bytes) -> None:
    header = _gif_header(signature, 40_000, 3)
    assert len(header) == 10
    assert image_dimensions(header) == (40_000, 3)
    assert image_dimensions(header[:9]) is None


def test_sizes_beyond_the_signed_range_are_read_unsigned() -> None:
    assert image_dimensions(_png_header(2**31 + 5, 1)) == (2**31 + 5, 1)


def test_a_webp_header_of_exactly_30_bytes_is_enough() -> None:
    lossy = _encoded((33, 44), {"format": "WEBP", "lossless": False})
    extended = _encoded((33, 44), {"format": "WEBP", "lossless": False}, "RGBA")
    for data in (lossy, extended):
        assert image_dimensions(data[:30]) == (33, 44)
        assert image_dimensions(data[:29]) is None


@pytest.mark.parametrize(
    "sof", [0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE]
)
def test_every_jpeg_frame_marker_carries_the_size(sof: int) -> None:
    assert image_dimensions(_jpeg(sof, 640, 480)) == (640, 480)


@pytest.mark.parametrize("other", [0xC4, 0xC8, 0xCC, 0xDB])
def test_tables_and_reserved_markers_are_skipped(other: int) -> None:
    """A DHT, JPG, DAC or DQT segment has no size; the frame after it has."""
    segment = bytes([0xFF, other]) + (4).to_bytes(2, "big") + b"\x00\x00"
    data = _jpeg(0xC0, 5, 6)
    assert image_dimensions(data[:2] + segment + data[2:]) == (5, 6)
    assert image_dimensions(data[:2] + segment + b"\x00" * 30) is None


def test_a_jpeg_segment_longer_than_255_bytes_is_skipped_whole() -> None:
    assert image_dimensions(_jpeg(0xC0, 320, 200, app_length=700)) == (320, 200)
    progressive = _encoded((321, 201), {"format": "JPEG", "exif": b"Exif\x00\x00" + b"\x00" * 600})
    assert image_dimensions(progressive) == (321, 201)


@pytest.mark.parametrize("size", [(0, 10), (10, 0), (0, 0)])
def test_an_image_with_no_area_costs_the_maximum(size: tuple[int, int]) -> None:
    assert image_tokens(_source(_png_header(*size) + b"\x00" * 8)) == IMAGE_TOKENS_MAX


def test_base64_with_line_breaks_is_read() -> None:
    data = _encoded((90, 60), {"format": "PNG"})
    encoded = base64.encodebytes(data).decode()  # MIME style: a newline every 76 characters
    assert "\n" in encoded
    source = {"type": "base64", "media_type": "image/png", "data": encoded}
    assert image_tokens(source) == _expected_tokens(90, 60)


def test_what_lies_past_the_first_64_kib_is_never_decoded() -> None:
    """A dangling character at the very end would make decoding the whole string fail."""
    data = _encoded((40, 30), {"format": "PNG"})
    data += b"\x00" * (3 - len(data) % 3) + b"\x00" * 90_000
    assert len(data) % 3 == 0
    source = _source(data)
    source["data"] += "A"
    assert len(source["data"]) > 64 * 1024
    assert image_tokens(source) == _expected_tokens(40, 30)


# -- text counts with the offline tiktoken encoding --------------------------------------


def test_the_offline_encoding_counts_text() -> None:
    from contextstore.core.tokens import TiktokenCounter

    counter = TiktokenCounter()
    assert counter.name == "auto" and counter.calls == 0
    assert counter.count("") == 0
    assert counter.count("hello world") == 2
    assert counter.count("<|endoftext|>") > 1, "special tokens count as text"
    assert counter.calls == 3
    assert counter.name in ("cl100k_base", "o200k_base")
    named = TiktokenCounter("cl100k_base")
    assert named.count("hello world") == 2 and named.name == "cl100k_base"


def test_a_count_is_the_length_of_tiktokens_own_encoding_with_specials_as_text() -> None:
    from contextstore.core.tokens import TiktokenCounter

    counter = TiktokenCounter("cl100k_base")
    encoding = counter._load()
    texts = [
        "plain words, then <|endoftext|> and <|fim_prefix|>x<|fim_suffix|> in the middle",
        "<|endoftext|>" * 3,
        "unicode: \u00e9\u4e2d\U0001f600 and a tab\tthen spaces   end",
    ]
    for text in texts:
        assert counter.count(text) == len(encoding.encode(text, disallowed_special=()))


def test_o200k_without_its_cached_file_is_a_clear_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextstore.core.errors import ContextStoreError
    from contextstore.core.tokens import TiktokenCounter

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ContextStoreError, match="o200k_base is not in the local tiktoken cache"):
        TiktokenCounter("o200k_base").count("x")
    assert TiktokenCounter().count("hello world") == 2  # falls back to cl100k_base


def test_block_counts_use_each_kind_of_text() -> None:
    def count(text: str) -> int:
        return len(text)

    assert block_tokens({"type": "text"}, count) == 0
    assert block_tokens({"type": "tool_use", "input": {"b": "é", "a": 1}}, count) == len(
        '{"a": 1, "b": "é"}'
    )
    assert block_tokens({"type": "tool_use", "name": "ls"}, count) == 2 + len("{}")
    assert block_tokens({"type": "thinking"}, count) == 0
    png = _encoded((75, 10), {"format": "PNG"})
    assert block_tokens({"type": "image", "source": _source(png)}, count) == 1
    assert block_tokens({"type": "image"}, count) == IMAGE_TOKENS_MAX
    assert block_tokens({"type": "document", "source": {"type": "text", "data": "abc"}}, count) == 3
    assert block_tokens({"type": "document"}, count) == PDF_TOKENS_PER_PAGE


@pytest.mark.parametrize("content", [None, {"type": "text", "text": "abc"}, 7])
def test_a_result_or_document_whose_content_is_not_a_list_counts_nothing_of_it(
    content: Any,
) -> None:
    count = len
    result = {"type": "tool_result", "tool_use_id": "t"}
    if content is not None:
        result["content"] = content
    assert block_tokens(result, count) == 0
    document = {"type": "document", "source": {"type": "content", "content": content}}
    assert block_tokens(document, count) == 0
