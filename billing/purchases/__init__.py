"""Credits a team buys with Stripe Checkout (docs/operations/stripe.md).

An owner picks a pack or an amount on the Credits page (or `POST /api/v1/billing/checkout/`);
`purchase_checkout_start` opens a Checkout Session at Stripe and records a pending Purchase.
Stripe then calls `POST /billing/stripe/webhook/`: `purchase_event_handle` checks the
signature with the `stripe` library, finds the Purchase by the session id (never by what the
event's metadata claims), and grants its credits through billing.services.credits_grant with
the event id as the ledger key, so a replayed event grants once. A refund takes back what is
left of the purchase's credits, in proportion to the amount refunded.
"""
