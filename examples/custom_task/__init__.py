"""A worked example of a user task: lexicon sentiment (``examples.custom_task.sentiment:SentimentTask``)."""
