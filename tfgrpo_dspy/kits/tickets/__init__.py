"""Tickets kit: SYNTHETIC support tickets routed by made-up house rules that only feedback reveals."""

from tfgrpo_dspy.kits.tickets.generator import generate_tickets
from tfgrpo_dspy.kits.tickets.metric import parse_queue, queue_match
from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES, PLACEBO_LESSONS, QUEUES, Rule, TicketFacts, route
from tfgrpo_dspy.kits.tickets.task import TICKET_TASKS, TICKETS, make_program

__all__ = [
    "HOUSE_RULES",
    "PLACEBO_LESSONS",
    "QUEUES",
    "TICKETS",
    "TICKET_TASKS",
    "Rule",
    "TicketFacts",
    "generate_tickets",
    "make_program",
    "parse_queue",
    "queue_match",
    "route",
]
