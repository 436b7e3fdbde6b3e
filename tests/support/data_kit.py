"""Builders for structured-data and document tests: tickets, PDFs made byte by byte, notebooks."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

STATUSES = ("open", "closed", "pending", "escalated")
PRIORITIES = ("low", "medium", "high", "urgent")


def tickets(n: int, seed: int = 13) -> list[dict[str, Any]]:
    """``n`` generated support tickets (ids 1..n) with a status, priority, team and text."""
    rng = random.Random(seed)
    words = "login fails after update reset password page error again slow export crash invoice".split()
    return [{"id": i, "status": rng.choice(STATUSES), "priority": rng.choice(PRIORITIES),
             "team": f"team-{rng.randint(1, 12)}", "subject": " ".join(rng.choices(words, k=6)),
             "minutes": rng.randint(1, 600)} for i in range(1, n + 1)]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF whose pages show ``pages`` (one line of text per ``\\n``), Helvetica 12 pt."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        ops = " ".join(f"({esc(line)}) Tj T*" for line in text.split("\n"))
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {ops} ET"
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                    f"/Contents {5 + 2 * i} 0 R >>".encode())
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream".encode())
    return pdf_from_objects(objs, b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")


def pdf_from_objects(objs: list[bytes], header: bytes = b"%PDF-1.4\n") -> bytes:
    """A PDF file of ``objs`` (object 1 the catalog), numbered from 1, with its xref table and trailer."""
    out = header
    offsets = []
    for k, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{k} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    return out + f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()


def encrypt_pdf(data: bytes, password: str = "s3cret") -> bytes:
    """``data`` encrypted by pypdf with a user password (RC4-128: no crypto library needed)."""
    import pypdf

    writer = pypdf.PdfWriter(clone_from=io.BytesIO(data))
    writer.encrypt(user_password=password, owner_password="owner-" + password, algorithm="RC4-128")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def notebook(cells: list[dict[str, Any]]) -> str:
    """An nbformat-4 notebook holding ``cells`` (each ``{"cell_type", "source", "outputs"?}``)."""
    full = [{"metadata": {}, **({"outputs": [], "execution_count": 1} if c["cell_type"] == "code" else {}), **c}
            for c in cells]
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python"}},
                       "cells": full}, indent=1)
