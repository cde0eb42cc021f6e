"""A stand-in for Stripe's API on loopback, for the purchase tests and the browser test.

A threaded http.server that speaks the part of Stripe's API Groundwork uses, in Stripe's
shapes: `POST /v1/checkout/sessions` (form-encoded, as the stripe library sends it) and
`GET /v1/checkout/sessions/{id}` (with `expand[]=payment_intent.latest_charge`), and the
hosted checkout page at `/c/pay/{id}`, which a test "pays" with `pay()`. Events are signed
here from Stripe's documented scheme, not with the library: `Stripe-Signature:
t=<unix time>,v1=<hex HMAC-SHA256(secret, "<t>.<payload>")>`.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit


def stripe_signature(payload: bytes, secret: str, timestamp: int | None = None) -> str:
    """The Stripe-Signature header Stripe would send with `payload`."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    signed = f"{timestamp}.".encode() + payload
    return f"t={timestamp},v1={hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()}"


def form_decode(body: str) -> dict:
    """Stripe's form encoding (`a[b][0][c]=1`) back into nested dicts and lists."""
    result: dict = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        parts = re.findall(r"[^\[\]]+", key)
        node = result
        for part, _following in zip(parts, parts[1:]):
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return _listify(result)


def _listify(node):
    if not isinstance(node, dict):
        return node
    if node and all(key.isdigit() for key in node):
        return [_listify(node[key]) for key in sorted(node, key=int)]
    return {key: _listify(value) for key, value in node.items()}


class StripeStandIn:
    def __init__(self, secret_key: str = "sk_test_standin", port: int = 0):
        self.secret_key = secret_key
        self.sessions: dict[str, dict] = {}
        self.requests: list[dict] = []  # every API call: method, path, form, headers
        self.fail_creates = False  # answer session creation with a 500 (Stripe down)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> StripeStandIn:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- what a test does at "Stripe" --------------------------------------------------

    def pay(self, session_id: str) -> dict:
        """The buyer paid: the session is complete, with a payment intent and a charge."""
        with self._lock:
            session = self.sessions[session_id]
            suffix = session_id.removeprefix("cs_test_")
            session.update(status="complete", payment_status="paid", payment_intent=f"pi_{suffix}")
            session["_charge"] = {
                "id": f"ch_{suffix}",
                "object": "charge",
                "amount": session["amount_total"],
                "amount_refunded": 0,
                "currency": session["currency"],
                "refunded": False,
                "payment_intent": f"pi_{suffix}",
                "receipt_url": f"{self.base_url}/receipts/{suffix}",
            }
            return self.public(session)

    def refund(self, session_id: str, amount: int) -> dict:
        """Refund `amount` more of the session's charge; the charge as charge.refunded sends it."""
        with self._lock:
            charge = self.sessions[session_id]["_charge"]
            charge["amount_refunded"] = min(charge["amount"], charge["amount_refunded"] + amount)
            charge["refunded"] = charge["amount_refunded"] == charge["amount"]
            return dict(charge)

    def public(self, session: dict) -> dict:
        return {key: value for key, value in session.items() if not key.startswith("_")}

    @staticmethod
    def event(kind: str, obj: dict, event_id: str | None = None) -> bytes:
        return json.dumps(
            {
                "id": event_id or f"evt_{secrets.token_hex(12)}",
                "object": "event",
                "api_version": "2025-01-27.acacia",
                "created": int(time.time()),
                "livemode": False,
                "type": kind,
                "data": {"object": obj},
            }
        ).encode()

    @staticmethod
    def deliver(url: str, payload: bytes, secret: str, signature: str | None = None) -> tuple[int, str]:
        """POST a signed event to a webhook URL, as Stripe does; (status, body)."""
        request = urllib.request.Request(
            url,
            data=payload,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                "Stripe-Signature": signature or stripe_signature(payload, secret),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    # --- the HTTP side -------------------------------------------------------------------

    def _create(self, form: dict) -> dict:
        item = form["line_items"][0]
        amount = int(item["price_data"]["unit_amount"]) * int(item.get("quantity", 1))
        session_id = f"cs_test_{secrets.token_hex(12)}"
        session = {
            "id": session_id,
            "object": "checkout.session",
            "mode": form["mode"],
            "status": "open",
            "payment_status": "unpaid",
            "amount_total": amount,
            "currency": item["price_data"]["currency"],
            "client_reference_id": form.get("client_reference_id"),
            "metadata": form.get("metadata", {}),
            # Stripe fills in the session's id where the success URL asks for it.
            "success_url": form["success_url"].replace("{CHECKOUT_SESSION_ID}", session_id),
            "cancel_url": form["cancel_url"],
            "payment_intent": None,
            "customer_email": form.get("customer_email"),
            "livemode": False,
            "url": f"{self.base_url}/c/pay/{session_id}",
        }
        with self._lock:
            self.sessions[session_id] = session
        return self.public(session)

    def _retrieve(self, session_id: str, expand: list[str]) -> dict | None:
        with self._lock:
            session = self.sessions.get(session_id)
            if session is None:
                return None
            shown = self.public(session)
            if "payment_intent.latest_charge" in expand and session.get("_charge"):
                shown["payment_intent"] = {
                    "id": session["payment_intent"],
                    "object": "payment_intent",
                    "latest_charge": dict(session["_charge"]),
                }
            return shown

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict | str, content_type: str = "application/json"):
                data = (json.dumps(body) if isinstance(body, dict) else body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Request-Id", f"req_{secrets.token_hex(6)}")
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {standin.secret_key}":
                    return True
                self._send(401, {"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}})
                return False

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = form_decode(body)
                standin.requests.append(
                    {"method": "POST", "path": self.path, "form": form, "headers": dict(self.headers)}
                )
                if not self._authorized():
                    return
                if self.path != "/v1/checkout/sessions":
                    return self._send(404, {"error": {"type": "invalid_request_error", "message": "Unrecognized URL"}})
                if standin.fail_creates:
                    return self._send(500, {"error": {"type": "api_error", "message": "Stand-in told to fail"}})
                self._send(200, standin._create(form))

            def do_GET(self):
                url = urlsplit(self.path)
                page = re.fullmatch(r"/c/pay/(cs_test_[0-9a-f]+)", url.path)
                if page:
                    session = standin.sessions.get(page.group(1))
                    if session is None:
                        return self._send(404, "no such checkout", "text/plain")
                    return self._send(
                        200,
                        (
                            "<!doctype html><title>Stripe Checkout (stand-in)</title><h1>Pay Groundwork</h1>"
                            f"<p id='amount'>{session['amount_total']} {html.escape(session['currency'])}</p>"
                            f"<a id='back' href='{html.escape(session['success_url'])}'>Back</a>"
                        ),
                        "text/html",
                    )
                standin.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
                if not self._authorized():
                    return
                found = re.fullmatch(r"/v1/checkout/sessions/([A-Za-z0-9_]+)", url.path)
                expand = [value for key, value in parse_qsl(url.query) if key.startswith("expand")]
                session = standin._retrieve(found.group(1), expand) if found else None
                if session is None:
                    return self._send(
                        404,
                        {
                            "error": {
                                "type": "invalid_request_error",
                                "code": "resource_missing",
                                "message": "No such checkout.session",
                            }
                        },
                    )
                self._send(200, session)

        return Handler
