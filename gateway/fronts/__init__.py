"""Encoders of the pipeline's neutral (chat-chunk-shaped) output into each API's wire format."""
