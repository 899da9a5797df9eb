from numpy_transformer.moved import refuse_moved

refuse_moved(__name__)
