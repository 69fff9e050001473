"""The house rules by which a fictional company routes its SYNTHETIC support tickets.

Nothing here comes from a real help desk. "Tillpoint", a made-up seller of point-of-sale
hardware and software, routes every support ticket to one of `QUEUES` by a fixed list of
house rules (`HOUSE_RULES`), the first matching rule winning. The rules are deliberately
arbitrary in the way real house rules are: a chargeback goes to trust-safety, not payments;
a Free-plan ticket goes to self-service whatever it asks; a refund of $500 or less goes to
self-service, a larger one to tier2-payments; a broken card reader in APAC goes to general
(a local partner repairs it) but to field-ops in the EU. A model cannot guess them from the
queue names; only feedback on its routing reveals them, so lessons that carry this domain
knowledge ("When a ticket asks for a refund of more than $500, route it to tier2-payments.")
can help where generic reasoning tips cannot.

Each rule is a predicate over `TicketFacts` (plan, region, issue, product, amount) that the
ticket text shows: the header line gives the plan and region ("Plan: Enterprise | Region:
EU"), the body names the product, the dollar amount and the issue in words. Every rule also
carries the one-line lesson a perfect reflector would write (``Rule.lesson``), and
`PLACEBO_LESSONS` holds as many neutral lines of similar length that carry no routing
knowledge, for studies comparing hand-written lessons, no lessons and placebo lessons.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

QUEUES = (
    "tier2-payments",
    "trust-safety",
    "field-ops",
    "self-service",
    "enterprise-desk",
    "retention",
    "general",
)
PLANS = ("Free", "Starter", "Pro", "Enterprise")
REGIONS = ("NA", "EU", "APAC", "LATAM")
HARDWARE = ("POS terminal", "card reader", "self-order kiosk", "receipt printer", "cash drawer")
SOFTWARE = ("web dashboard", "mobile app", "inventory module", "payments API", "loyalty app")
# What a ticket is about; a ticket has exactly one issue.
ISSUES = (
    "chargeback",
    "login",
    "refund",
    "data_request",
    "hardware_fault",
    "cancellation",
    "howto",
    "invoice",
    "feature_request",
    "outage",
)
REFUND_THRESHOLD = 500  # dollars; a refund of more than this goes to tier2-payments


@dataclass(frozen=True)
class TicketFacts:
    """The attributes a ticket's text shows, which the house rules read."""

    plan: str
    region: str
    issue: str
    product: str
    amount: int | None = None  # dollars, for tickets that name an amount

    @property
    def hardware(self) -> bool:
        return self.product in HARDWARE


@dataclass(frozen=True)
class Rule:
    """One house rule: tickets it ``applies`` to go to ``queue`` unless an earlier rule matched.

    ``lesson`` is the experience a perfect reflector would write for it: one line starting
    with "When", at most 32 words.
    """

    name: str
    queue: str
    lesson: str
    applies: Callable[[TicketFacts], bool]


# Precedence: the first rule that applies decides the queue; the last one always applies.
HOUSE_RULES: tuple[Rule, ...] = (
    Rule(
        "chargeback",
        "trust-safety",
        "When a ticket mentions a chargeback, route it to trust-safety, whatever else it asks for and whatever "
        "the customer's plan.",
        lambda t: t.issue == "chargeback",
    ),
    Rule(
        "free_plan",
        "self-service",
        "When the header says Plan: Free, route the ticket to self-service whatever the issue (refunds, broken "
        "devices, logins), unless it mentions a chargeback.",
        lambda t: t.plan == "Free",
    ),
    Rule(
        "enterprise_login",
        "enterprise-desk",
        "When an Enterprise-plan customer has a password, login or 2FA problem, route it to enterprise-desk, "
        "not self-service.",
        lambda t: t.plan == "Enterprise" and t.issue == "login",
    ),
    Rule(
        "refund_over_500",
        "tier2-payments",
        "When a ticket asks for a refund of more than $500, route it to tier2-payments.",
        lambda t: t.issue == "refund" and t.amount is not None and t.amount > REFUND_THRESHOLD,
    ),
    Rule(
        "refund_up_to_500",
        "self-service",
        "When a ticket asks for a refund of $500 or less, route it to self-service, not tier2-payments.",
        lambda t: t.issue == "refund" and t.amount is not None and t.amount <= REFUND_THRESHOLD,
    ),
    Rule(
        "eu_data_request",
        "trust-safety",
        "When a customer in Region: EU asks to export or delete data, route it to trust-safety; the same "
        "request from other regions goes to general.",
        lambda t: t.region == "EU" and t.issue == "data_request",
    ),
    Rule(
        "partner_region_hardware",
        "general",
        "When a hardware device (terminal, card reader, kiosk, printer, cash drawer) is faulty in Region: APAC "
        "or LATAM, route it to general; local partners repair it.",
        lambda t: t.issue == "hardware_fault" and t.region in ("APAC", "LATAM"),
    ),
    Rule(
        "hardware_fault",
        "field-ops",
        "When a hardware device is faulty in Region: NA or EU, route it to field-ops, even for Enterprise "
        "customers.",
        lambda t: t.issue == "hardware_fault",
    ),
    Rule(
        "paid_cancellation",
        "retention",
        "When a Pro or Enterprise customer asks to cancel, route it to retention; Starter cancellations go to "
        "general.",
        lambda t: t.issue == "cancellation" and t.plan in ("Pro", "Enterprise"),
    ),
    Rule(
        "default",
        "general",
        "When no other lesson applies (how-to questions, invoices, feature requests, app outages, Starter or "
        "Pro login problems), route the ticket to general.",
        lambda t: True,
    ),
)
RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in HOUSE_RULES}
DEFAULT_QUEUE = HOUSE_RULES[-1].queue

# Neutral lines of the same count and a similar length: the "When" form, no routing knowledge.
PLACEBO_LESSONS: tuple[str, ...] = (
    "When a customer writes in the morning, the office is usually quiet and the coffee is fresh.",
    "When a ticket arrives on a Friday, the team often looks forward to the weekend and swaps stories.",
    "When a store owner mentions their city, remember that every city has its own weather and local history.",
    "When a message is polite, it is pleasant to read, and a kind tone can make the whole day feel lighter.",
    "When a customer signs with a first name, it is a reminder that a real person wrote every ticket.",
    "When the support office gets busy, someone usually opens a window and waters the plants by the door.",
    "When a ticket is short, it takes only a moment to read, and longer tickets take a little more time.",
    "When a customer runs a café or a bakery, their day often starts early, long before the shop opens.",
    "When a new month begins, the calendar on the office wall is turned to a fresh page with a new picture.",
    "When a reply has been sent, the ticket moves down the list and the next message appears at the top.",
)


def route(facts: TicketFacts) -> Rule:
    """The house rule that decides ``facts``: the first in `HOUSE_RULES` that applies."""
    return next(rule for rule in HOUSE_RULES if rule.applies(facts))
