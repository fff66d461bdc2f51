"""Where messages go that cannot be decoded or validated, and the headers that say why.

Every consumer that rejects a message republishes its raw bytes to `dead_letter_subject(subject)`
with the reason in headers; operators and tools subscribe to `deadletter.>`.
"""

DEAD_LETTER_PREFIX = "deadletter"
DEAD_LETTER_ALL = f"{DEAD_LETTER_PREFIX}.>"
DEAD_LETTER_STREAM = "DEADLETTER"

#: header carrying the human-readable reason (decode error, validation error, handler failure)
HEADER_REASON = "Gpuaware-Dead-Letter-Reason"
#: header carrying the subject the message was first published on
HEADER_ORIGINAL_SUBJECT = "Gpuaware-Original-Subject"
#: header carrying the consumer (durable or service) that rejected it
HEADER_CONSUMER = "Gpuaware-Rejected-By"
#: header carrying how many times delivery was attempted before giving up
HEADER_ATTEMPTS = "Gpuaware-Attempts"


def dead_letter_subject(subject: str) -> str:
    """`telemetry.gpu.sampled.v1` -> `deadletter.telemetry.gpu.sampled.v1`."""
    return f"{DEAD_LETTER_PREFIX}.{subject}"
