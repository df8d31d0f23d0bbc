//! Webhook event delivery: signing, the durable outbox, retry schedule and the worker.
