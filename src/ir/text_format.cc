// Placeholder until the text format lands.
