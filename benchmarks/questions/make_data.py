"""The two synthetic corpora of the question bench: a web server's access log and an orders file.

    python benchmarks/questions/make_data.py OUT_DIR      # writes OUT_DIR/access.log, OUT_DIR/orders.jsonl

Both are seeded (the same bytes on every machine and every run), so golds computed from them in
``make_questions.py`` hold wherever the bench runs. The log is the Apache/nginx "combined" format
(``IP - user [time] "METHOD PATH PROTO" status bytes "referer" "agent"``), a shop's traffic over
three days; the orders are one JSON object per line with a nested customer, line items, totals
and a status. Neither resembles the ``key=value`` lines or ticket lines ``rlm eval`` generates.
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

LOG_NAME = "access.log"
ORDERS_NAME = "orders.jsonl"
LOG_LINES = 3200
ORDERS = 900

_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/129.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:131.0) Gecko/20100101 Firefox/131.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "curl/8.5.0",
    "python-requests/2.32.3",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
)
_AGENT_WEIGHTS = (30, 18, 12, 16, 4, 5, 6)
_STATIC = ("/static/css/site.css", "/static/css/print.css", "/static/js/app.js", "/static/js/vendor.js",
           "/static/img/logo.svg", "/static/img/hero.jpg", "/static/fonts/inter.woff2", "/favicon.ico")
_PAGES = ("/", "/products", "/products/espresso-grinder", "/products/pour-over-kettle", "/products/burr-set",
          "/cart", "/checkout", "/about", "/blog/cold-brew-guide", "/blog/water-hardness", "/search?q=filter")
_API = ("/api/products", "/api/cart", "/api/orders", "/api/login", "/api/logout", "/api/stock/1042")
_PROBES = ("/wp-login.php", "/.env", "/admin/config.php", "/phpmyadmin/", "/old-catalog.html", "/products/moka-pot")


def _ips(rng: random.Random, n: int) -> list[str]:
    nets = ("203.0.113", "198.51.100", "192.0.2", "100.64.12", "172.16.40")
    return sorted({f"{rng.choice(nets)}.{rng.randint(2, 254)}" for _ in range(n)})


def _static_size(path: str, rng: random.Random) -> int:
    base = {"css": 18_000, "js": 95_000, "img": 40_000, "fonts": 30_000}.get(path.split("/")[2] if path.startswith(
        "/static/") else "", 1_150)
    return base + rng.randint(-900, 900)


def log_records(seed: int = 21) -> list[dict[str, Any]]:
    """The access log's requests as dicts (``ip``, ``user``, ``time`` (aware datetime), ``method``,
    ``path``, ``status``, ``size`` (int or None for ``-``), ``referer``, ``agent``), in time order."""
    rng = random.Random(f"{seed}:log")
    ips = _ips(rng, 140)
    heavy = rng.sample(ips, 6)
    scanner = rng.choice([ip for ip in ips if ip not in heavy])
    t = datetime(2026, 9, 14, 6, 0, 4, tzinfo=timezone(timedelta(hours=2)))
    out: list[dict[str, Any]] = []
    for _ in range(LOG_LINES):
        t += timedelta(seconds=rng.randint(1, 160))
        ip = rng.choice(heavy) if rng.random() < 0.25 else rng.choice(ips)
        agent = rng.choices(_AGENTS, _AGENT_WEIGHTS)[0]
        user = "-"
        roll = rng.random()
        if roll < 0.45:
            method, path = "GET", rng.choice(_STATIC)
            status = 304 if rng.random() < 0.2 else 200
        elif roll < 0.75:
            method, path = "GET", rng.choice(_PAGES)
            status = rng.choices((200, 301, 404, 500), (88, 4, 5, 3))[0]
        elif roll < 0.95:
            path = rng.choice(_API)
            method = {"/api/login": "POST", "/api/logout": "POST", "/api/cart": rng.choice(("GET", "POST", "PUT")),
                      "/api/orders": rng.choice(("GET", "POST")),
                      "/api/stock/1042": rng.choice(("GET", "PATCH"))}.get(path, "GET")
            if path == "/api/login":
                status = rng.choices((200, 401, 429), (60, 35, 5))[0]
            else:
                status = rng.choices((200, 201, 400, 403, 500, 502), (70, 8, 8, 5, 5, 4))[0]
            if status in (200, 201) and path != "/api/login":
                user = rng.choice(("mila", "jonas", "aylin", "pieter", "sofia", "-"))
        else:
            ip, agent = scanner if rng.random() < 0.5 else ip, rng.choice(_AGENTS[4:6])
            method, path = rng.choice(("GET", "GET", "HEAD", "POST")), rng.choice(_PROBES)
            status = 404 if path != "/products/moka-pot" else 410
        if path.startswith("/static/") or path == "/favicon.ico":
            size: int | None = None if status == 304 else _static_size(path, rng)
        elif method == "HEAD" or status in (301, 304):
            size = None if method == "HEAD" else 162
        else:
            size = rng.randint(120, 480) if status >= 400 or path.startswith("/api/") else rng.randint(4_000, 38_000)
        referer = "-" if path.startswith("/api/") or rng.random() < 0.3 else "https://beanbox.example" + rng.choice(
            _PAGES)
        out.append({"ip": ip, "user": user, "time": t, "method": method, "path": path, "status": status,
                    "size": size, "referer": referer, "agent": agent})
    return out


def log_line(r: dict[str, Any]) -> str:
    """One record in the combined log format."""
    when = r["time"].strftime("%d/%b/%Y:%H:%M:%S %z")
    size = "-" if r["size"] is None else str(r["size"])
    return (f'{r["ip"]} - {r["user"]} [{when}] "{r["method"]} {r["path"]} HTTP/1.1" {r["status"]} {size} '
            f'"{r["referer"]}" "{r["agent"]}"')


_FIRST = ("Ana", "Bram", "Chen", "Dara", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jakob", "Kavya", "Lars", "Maya",
          "Nils", "Oona", "Pavel", "Rosa", "Sami", "Tomas", "Uma", "Vera", "Wes", "Yara", "Zeno")
_LAST = ("Alves", "Berg", "Costa", "Dvorak", "Eriksen", "Fischer", "Gomez", "Haas", "Ito", "Jansen", "Kowal",
         "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Schmidt", "Tanaka")
_PRODUCTS = {"GRN-100": ("Conical burr grinder", 129.00), "KTL-220": ("Gooseneck kettle", 64.50),
             "FLT-010": ("Paper filters (100)", 6.90), "BNS-ETH": ("Ethiopia Guji beans 250g", 14.20),
             "BNS-COL": ("Colombia Huila beans 250g", 12.80), "BNS-DEC": ("Decaf Swiss water 250g", 13.40),
             "SCL-005": ("Brew scale", 39.99), "DRP-002": ("Ceramic dripper", 27.00),
             "MUG-330": ("Double-wall mug", 18.50), "CLN-050": ("Descaler tablets", 9.75)}
_COUNTRIES = ("DE", "NL", "FR", "AT", "BE", "DK", "SE", "IT", "ES", "PL")
_STATUSES = ("delivered", "delivered", "delivered", "shipped", "shipped", "processing", "cancelled", "refunded")


def orders(seed: int = 21) -> list[dict[str, Any]]:
    """The orders as dicts in file order (ids ascending, dates ascending)."""
    rng = random.Random(f"{seed}:orders")
    names = sorted({f"{rng.choice(_FIRST)} {rng.choice(_LAST)}" for _ in range(170)})
    customers = [{"id": f"CU-{3000 + i * 7}", "name": n,
                  "email": n.lower().replace(" ", ".") + rng.choice(("@mail.example", "@post.example")),
                  "country": rng.choice(_COUNTRIES)} for i, n in enumerate(names)]
    weights = [rng.paretovariate(1.6) for _ in customers]
    when = datetime(2026, 1, 3, 8, 0, tzinfo=UTC)
    out: list[dict[str, Any]] = []
    for i in range(ORDERS):
        when += timedelta(minutes=rng.randint(20, 900))
        cust = rng.choices(customers, weights)[0]
        items = []
        for sku in rng.sample(sorted(_PRODUCTS), rng.choices((1, 2, 3, 4), (45, 30, 17, 8))[0]):
            qty = rng.choices((1, 2, 3, 5), (70, 20, 7, 3))[0]
            items.append({"sku": sku, "title": _PRODUCTS[sku][0], "qty": qty, "unit_price": _PRODUCTS[sku][1]})
        subtotal = round(sum(it["qty"] * it["unit_price"] for it in items), 2)
        shipping = 0.0 if subtotal >= 50 else 4.90
        status = rng.choice(_STATUSES)
        order: dict[str, Any] = {
            "order_id": f"SO-{58100 + i * 3 + rng.randint(0, 2)}", "placed_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "status": status, "customer": dict(cust), "items": items,
            "subtotal": subtotal, "shipping": shipping, "total": round(subtotal + shipping, 2), "currency": "EUR",
        }
        if rng.random() < 0.12:
            order["coupon"] = rng.choice(("WELCOME10", "BREW5", "AUTUMN"))
        if status in ("shipped", "delivered"):
            order["carrier"] = rng.choice(("DHL", "PostNL", "UPS", "GLS"))
        out.append(order)
    return out


def write(out_dir: Path, seed: int = 21) -> dict[str, Path]:
    """Write both corpora under ``out_dir`` (made if missing); returns ``{"log": path, "jsonl": path}``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / LOG_NAME
    log.write_text("".join(log_line(r) + "\n" for r in log_records(seed)), encoding="utf-8")
    jsonl = out_dir / ORDERS_NAME
    jsonl.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in orders(seed)), encoding="utf-8")
    return {"log": log, "jsonl": jsonl}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=int, default=21)
    for kind, path in write(ap.parse_args().out_dir, ap.parse_args().seed).items():
        print(f"{kind}: {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
