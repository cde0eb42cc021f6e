"""`{{ document|progress_words }}`: the words after a document's status while it is indexed
("412/1,250 chunks · about 3 min left", "2nd in line"), as documents/progress.py writes them
for the API and static/js/app.js for the rows a page refreshes."""

from django import template

from documents import progress

register = template.Library()


@register.filter
def progress_words(document) -> str:
    return progress.page_context([document]).text(document)
