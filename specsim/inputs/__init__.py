"""User files, checked before anything reads them: paths (`files`) and strict CSV tables (`tables`)."""
