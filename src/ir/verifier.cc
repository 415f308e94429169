// Placeholder until the verifier lands.
