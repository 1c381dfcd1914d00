"""The token estimate of media parts and the model input check (docs/attachments.md "What the
model gets", "Model input"): a PDF file part counts per page, not by its data URL."""

from __future__ import annotations

import base64
import io

from pypdf import PdfWriter

from jxai_app.core.providers import ModelConfig
from jxai_app.core.tokens import IMAGE_TOKENS, PDF_PAGE_TOKENS, estimate_tokens, tokens_for_chars


def _pdf(pages: int) -> str:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return f"data:application/pdf;base64,{base64.b64encode(out.getvalue()).decode('ascii')}"


def _file(file_data: str) -> dict[str, object]:
    return {"type": "file", "file": {"filename": "a.pdf", "file_data": file_data}}


def test_a_pdf_file_part_counts_per_page_and_an_image_part_once() -> None:
    url = _pdf(3)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    message = {"role": "user", "content": [_file(url), image]}
    rest = {"role": "user", "content": [None, None]}
    assert estimate_tokens([message]) == estimate_tokens([rest]) + 3 * PDF_PAGE_TOKENS + IMAGE_TOKENS


def test_a_file_part_that_is_no_readable_pdf_counts_as_its_characters() -> None:
    part = _file("data:application/pdf;base64,bm90IGEgcGRm")  # "not a pdf"
    assert estimate_tokens([part]) == tokens_for_chars(len('[{"type": "file", "file": {"filename": "a.pdf", '
                                                           '"file_data": "data:application/pdf;base64,bm90IGEgcGRm"}}]'))


def test_file_parts_go_only_to_a_model_whose_input_holds_file() -> None:
    history = [{"role": "user", "content": [{"type": "text", "text": "Read it."}, _file(_pdf(1))]}]
    reader = ModelConfig(alias="reader", provider="p", model_id="m", input=("text", "image", "file"))
    vision = ModelConfig(alias="vision", provider="p", model_id="m", label="Vision")
    assert reader.refused_input(history) is None
    assert vision.refused_input(history) == ("The model Vision (vision) takes no file parts; send the file's text, "
                                             "or pick a model that takes files.")
