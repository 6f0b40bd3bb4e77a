"""β traces: the file format (`format`), synthetic generators (`synth`) and their statistics (`stats`)."""
