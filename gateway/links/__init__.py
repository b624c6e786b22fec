"""The product's domain: artifacts (scope, the links of an answer, downloads),
agent homes, link signatures, the pages a browser sees.
"""
