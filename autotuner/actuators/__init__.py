"""Adapters that carry a Decision out (Kubernetes, a GitOps manifest, an exec hook) and read
the live vLLM args back. They never decide."""
