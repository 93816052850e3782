"""This deployment's own workflows, registered by worker.py beside agentledger's engine."""

from workflows.refund_review import RefundRequest, RefundReviewWorkflow

WORKFLOWS = [RefundReviewWorkflow]

__all__ = ["WORKFLOWS", "RefundRequest", "RefundReviewWorkflow"]
